package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/protobuf"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

// fleetRecords: host h's GPU g draws 100+h+g/10 W, is h% busy, last heard
// h seconds before fleetBase.
func fleetRecords(hosts, gpus int) []*stream.Records {
	var out []*stream.Records
	for h := range hosts {
		r := &stream.Records{Host: fmt.Sprintf("node%03d", h), UUIDs: map[int]string{}}
		at := fleetBase.Add(-time.Duration(h) * time.Second).UnixNano()
		for g := range gpus {
			r.UUIDs[g] = fmt.Sprintf("GPU-%03d-%d", h, g)
			r.Batch.Samples = append(r.Batch.Samples,
				record.Sample{TimeNS: at, Value: 100 + float64(h) + float64(g)/10, Device: uint16(g), Metric: catalog.MetricPowerDraw},
				record.Sample{TimeNS: at, Value: float64(h % 101), Device: uint16(g), Metric: catalog.MetricUtilGPU})
		}
		out = append(out, r)
	}
	return out
}

// At fleet scale the table shows the first -top rows in -sort order, only
// the -host patterns' hosts, and a line that says what it left out.
func TestFleetTableTopSortFilter(t *testing.T) {
	row := func(host string, gpu int, power, util, age string) string {
		return fmt.Sprintf(fleetFormat, host, strconv.Itoa(gpu), fmt.Sprintf("GPU-%s-%d", host[4:], gpu), power, util, "-", "-", "-/-", age)
	}
	head := fmt.Sprintf(fleetFormat, "HOST", "GPU", "UUID", "POWER_W", "UTIL%", "GPU_C", "MEM_C", "MEM_USED/TOT_MiB", "AGE")
	for _, tc := range []struct {
		name    string
		top     int
		hosts   []string
		sortKey string
		want    string
	}{
		{"power top 3", 3, nil, "power", head + row("node999", 1, "1099.1", "90", "16m39s") + row("node999", 0, "1099.0", "90", "16m39s") +
			row("node998", 1, "1098.1", "89", "16m38s") + "(3 of 2000 GPUs on 1000 hosts, by power; -top 0 shows all)\n"},
		{"host order", 2, nil, "host", head + row("node000", 0, "100.0", "0", "0s") + row("node000", 1, "100.1", "0", "0s") +
			"(2 of 2000 GPUs on 1000 hosts, by host; -top 0 shows all)\n"},
		{"age: oldest first", 1, nil, "age", head + row("node999", 0, "1099.0", "90", "16m39s") +
			"(1 of 2000 GPUs on 1000 hosts, by age; -top 0 shows all)\n"},
		{"host patterns, all rows", 0, []string{"node01?", "node00[12]"}, "util", head +
			row("node019", 0, "119.0", "19", "19s") + row("node019", 1, "119.1", "19", "19s") +
			row("node018", 0, "118.0", "18", "18s") + row("node018", 1, "118.1", "18", "18s") +
			row("node017", 0, "117.0", "17", "17s") + row("node017", 1, "117.1", "17", "17s") +
			row("node016", 0, "116.0", "16", "16s") + row("node016", 1, "116.1", "16", "16s") +
			row("node015", 0, "115.0", "15", "15s") + row("node015", 1, "115.1", "15", "15s") +
			row("node014", 0, "114.0", "14", "14s") + row("node014", 1, "114.1", "14", "14s") +
			row("node013", 0, "113.0", "13", "13s") + row("node013", 1, "113.1", "13", "13s") +
			row("node012", 0, "112.0", "12", "12s") + row("node012", 1, "112.1", "12", "12s") +
			row("node011", 0, "111.0", "11", "11s") + row("node011", 1, "111.1", "11", "11s") +
			row("node010", 0, "110.0", "10", "10s") + row("node010", 1, "110.1", "10", "10s") +
			row("node002", 0, "102.0", "2", "2s") + row("node002", 1, "102.1", "2", "2s") +
			row("node001", 0, "101.0", "1", "1s") + row("node001", 1, "101.1", "1", "1s")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleetTable()
			f.top, f.hosts, f.sortKey = tc.top, tc.hosts, tc.sortKey
			for _, r := range fleetRecords(1000, 2) {
				f.add(r)
			}
			var b strings.Builder
			f.render(&b, fleetBase)
			if b.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

// A subscription that fell behind says how many messages it lost.
func TestFleetTableShowsDrops(t *testing.T) {
	f := newFleetTable()
	f.dropped = func() int { return 17 }
	f.add(fleetRecords(1, 1)[0])
	var b strings.Builder
	f.render(&b, fleetBase)
	want := fmt.Sprintf(fleetFormat, "HOST", "GPU", "UUID", "POWER_W", "UTIL%", "GPU_C", "MEM_C", "MEM_USED/TOT_MiB", "AGE") +
		fmt.Sprintf(fleetFormat, "node000", "0", "GPU-000-0", "100.0", "0", "-", "-", "-/-", "0s") +
		"(1 of 1 GPUs on 1 hosts, by host; -top 0 shows all; 17 messages dropped: the table fell behind, narrow -subject)\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// BenchmarkFleetTable: what `subscribe` does per message from a 1,000-node
// fleet (protobuf, as the NATS output publishes it: one subject's share of
// a one-second batch, 8 GPUs' power group), decode and fold into the table,
// and the table's render of the top 40 of 8,000 GPUs.
func BenchmarkFleetTable(b *testing.B) {
	var msgs []*nats.Msg
	var enc protobuf.Encoder
	perMsg := 0
	for h := range 1000 {
		host := fmt.Sprintf("node%04d", h)
		for g := range 8 {
			batch := &record.Batch{Seq: 1}
			for i := range 20 { // power: 20 samples/s at the default rates
				batch.Samples = append(batch.Samples, record.Sample{TimeNS: fleetBase.UnixNano() + int64(i)*5e7,
					Value: 300 + float64(i), Device: uint16(g), Metric: catalog.MetricPowerDraw})
			}
			perMsg = len(batch.Samples)
			hdr := nats.Header{}
			hdr.Set(stream.HeaderContentType, stream.ContentTypeProtobuf)
			hdr.Set(stream.HeaderSchema, strconv.Itoa(stream.SchemaVersion))
			hdr.Set(stream.HeaderSeq, "1")
			data := enc.Append(nil, batch, &protobuf.Meta{Host: host, UUIDs: []protobuf.DeviceRef{{Index: g, UUID: fmt.Sprintf("GPU-%04d-%d", h, g)}}})
			msgs = append(msgs, &nats.Msg{Subject: "gpusampler." + host + ".gpu.power", Header: hdr, Data: data})
		}
	}
	b.Run("add", func(b *testing.B) {
		f := newFleetTable()
		i := 0
		for b.Loop() {
			recs, err := stream.DecodeMsg(msgs[i%len(msgs)])
			if err != nil {
				b.Fatal(err)
			}
			f.add(recs)
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(b.N*perMsg)/b.Elapsed().Seconds(), "samples/s")
	})
	b.Run("render", func(b *testing.B) {
		f := newFleetTable()
		f.top, f.sortKey = 40, "power"
		for _, m := range msgs {
			recs, _ := stream.DecodeMsg(m)
			f.add(recs)
		}
		var sb strings.Builder
		for b.Loop() {
			sb.Reset()
			f.render(&sb, fleetBase)
		}
	})
}

// Bad table flags are usage errors naming the flag.
func TestSubscribeFleetFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sort", "watts"}, `-sort "watts": want one of host, power, util, temp, mem, age`},
		{[]string{"--top", "-1"}, "-top: must be 0 (all) or positive"},
		{[]string{"--host", "node[1"}, `-host "node[1": syntax error in pattern`},
	} {
		code, _, stderr := runCLI(t, append([]string{"subscribe"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
