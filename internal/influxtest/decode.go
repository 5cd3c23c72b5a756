package influxtest

import (
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

// lineProtocol is the header of a line-protocol message as the NATS output
// sends it, which stream.Decode selects its decoder by.
var lineProtocol = nats.Header{
	stream.HeaderContentType: {stream.ContentTypeLineProtocol},
	stream.HeaderSchema:      {strconv.Itoa(stream.SchemaVersion)},
}

// DecodeSamples parses nvidia_smi lines back into samples (base units,
// device from the index tag, point reads flagged), in line and field order,
// with the decoder a stream processor uses (stream.Decode), so that a test
// reads the lines as consumers do. Summary fields, other measurements and
// fields the catalog does not know are left out; a line that does not
// parse, or an nvidia_smi line without a device index, is an error.
func DecodeSamples(lp []byte) ([]record.Sample, error) {
	recs, err := stream.Decode(lineProtocol, lp)
	if err != nil {
		return nil, err
	}
	return recs.Batch.Samples, nil
}
