// Package metrictest holds what the module's tests compare Telegraf
// metrics with: line protocol parsed by Telegraf's own parser, and the
// whole content of a set of metrics as sorted points.
package metrictest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/plugins/parsers/influx"
)

// Parse parses line protocol with Telegraf's influx parser; what does not
// parse fails the test.
func Parse(tb testing.TB, text string) []telegraf.Metric {
	tb.Helper()
	p := &influx.Parser{}
	if err := p.Init(); err != nil {
		tb.Fatal(err)
	}
	ms, err := p.Parse([]byte(text))
	if err != nil {
		tb.Fatalf("line protocol does not parse: %v", err)
	}
	return ms
}

// Points flattens metrics into one sorted "measurement,tags field=value
// timestamp" string per field: the whole content, independent of how the
// fields of one timestamp were split between metrics.
func Points(ms []telegraf.Metric) []string {
	var out []string
	for _, m := range ms {
		var tags strings.Builder
		for _, k := range slices.Sorted(maps.Keys(m.Tags())) {
			fmt.Fprintf(&tags, ",%s=%s", k, m.Tags()[k])
		}
		for _, f := range m.FieldList() {
			out = append(out, fmt.Sprintf("%s%s %s=%#v %d", m.Name(), tags.String(), f.Key, f.Value, m.Time().UnixNano()))
		}
	}
	slices.Sort(out)
	return out
}
