package influxtest

import (
	"fmt"
	"strconv"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/gpusampler/gpusampler/sampler"
)

// DecodeSamples parses nvidia_smi lines back into samples (base units,
// device from the index tag), in line and field order; other measurements
// and fields the catalog does not know (point_read) are skipped.
func DecodeSamples(lp []byte, cat *sampler.Catalog) ([]sampler.Sample, error) {
	if cat == nil {
		cat = sampler.DefaultCatalog
	}
	byInflux := map[string]*sampler.Metric{}
	for _, m := range cat.All() {
		m := m
		byInflux[m.Influx().Name] = &m
	}
	dec := lineprotocol.NewDecoderWithBytes(lp)
	var out []sampler.Sample
	for dec.Next() {
		meas, err := dec.Measurement()
		if err != nil {
			return nil, err
		}
		dev := -1
		for {
			k, v, err := dec.NextTag()
			if err != nil {
				return nil, err
			}
			if k == nil {
				break
			}
			if string(k) == "index" {
				dev, _ = strconv.Atoi(string(v))
			}
		}
		type fv struct {
			m *sampler.Metric
			v float64
		}
		var fields []fv
		for {
			k, v, err := dec.NextField()
			if err != nil {
				return nil, err
			}
			if k == nil {
				break
			}
			m := byInflux[string(k)]
			if m == nil {
				continue
			}
			var x float64
			switch v.Kind() {
			case lineprotocol.Float:
				x = v.FloatV()
			case lineprotocol.Int:
				x = float64(v.IntV())
			default:
				return nil, fmt.Errorf("field %s: kind %v", k, v.Kind())
			}
			n := m.Influx()
			if n.Scale != 0 {
				x /= n.Scale
			}
			fields = append(fields, fv{m, x})
		}
		ts, err := dec.Time(lineprotocol.Nanosecond, time.Time{})
		if err != nil {
			return nil, err
		}
		if string(meas) != "nvidia_smi" || dev < 0 {
			continue
		}
		for _, f := range fields {
			out = append(out, sampler.Sample{TimeNS: ts.UnixNano(), Value: f.v, Device: uint16(dev), Metric: f.m.ID})
		}
	}
	return out, dec.Err()
}
