package influxdb_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/outputs/influxdb"
	"github.com/gpusampler/gpusampler/record"
)

// A batch holding a line the encoder must skip (a global tag line
// protocol cannot carry) is not posted: it is refused whole as permanent,
// so every record in it is counted as dropped, never as delivered.
func TestUnencodableBatchNotSent(t *testing.T) {
	sink := &clashSink{}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	out, err := influxdb.New(influxdb.Options{WriterOptions: influxdb.WriterOptions{Name: "test", URL: srv.URL, Database: "gpu"},
		Host: "node1", GlobalTags: map[string]string{"rack": ""}})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	b := &record.Batch{Seq: 1, Devices: []record.Device{testDevice}, Samples: mixedSamples(8, 1e18)}
	err = out.Write(context.Background(), b)
	if record.Classify(err) != record.KindPermanent || !strings.Contains(err.Error(), `influxdb "test": batch of 9 records not sent`) {
		t.Fatalf("err %v (%v)", err, record.Classify(err))
	}
	if sink.posts != 0 {
		t.Fatalf("%d requests sent", sink.posts)
	}
	if st := out.Stats(); st.EncodeRefused != 1 || st.Requests != 0 {
		t.Fatalf("stats %+v", st)
	}
}
