package catalog

import (
	"reflect"
	"strconv"
	"testing"
)

// What a Catalog hands out is a copy: changing it changes nothing that the
// next caller sees.
func TestCatalogHandsOutCopies(t *testing.T) {
	c := Default()
	want := NewCatalog()

	m, ok := c.Get(MetricPowerDraw)
	if !ok || m.Name != "power_draw" {
		t.Fatalf("Get(MetricPowerDraw) = %+v, %v", m, ok)
	}
	m.Name, m.Telegraf.Name = "changed", "changed"
	if l, ok := c.Lookup("power_draw"); !ok {
		t.Fatal("Lookup(power_draw) found nothing after a Get result was modified")
	} else {
		l.Unit = "changed"
	}
	all := c.All()
	all[0].Help = "changed"
	all[len(all)-1] = Metric{}
	_ = append(all[:1], Metric{Name: "appended"})

	if !reflect.DeepEqual(c.All(), want.All()) {
		t.Fatal("modifying what Get, Lookup and All returned changed the catalog")
	}
	for id := MetricID(1); int(id) < c.Len(); id++ {
		got, _ := c.Get(id)
		exp, _ := want.Get(id)
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("Get(%d) = %+v, want %+v", id, got, exp)
		}
	}
	if Default() != c {
		t.Fatal("Default returned another catalog")
	}
}

func TestCatalogMissing(t *testing.T) {
	c := Default()
	for _, id := range []MetricID{0, MetricID(c.Len()), MetricID(c.Len() + 7)} {
		if m, ok := c.Get(id); ok || m != (Metric{}) {
			t.Errorf("Get(%d) = %+v, %v; want the zero Metric, false", id, m, ok)
		}
		if n := c.Name(id); n != "metric("+strconv.Itoa(int(id))+")" {
			t.Errorf("Name(%d) = %q", id, n)
		}
	}
	if m, ok := c.Lookup("no_such_metric"); ok || m != (Metric{}) {
		t.Errorf("Lookup(no_such_metric) = %+v, %v", m, ok)
	}
}

func TestGroupsAndReasonNamesAreCopies(t *testing.T) {
	g := Groups()
	g[0] = "changed"
	if Groups()[0] != GroupPower {
		t.Fatal("modifying Groups() changed the groups")
	}
	r := ReasonNames()
	r[0].Name = "changed"
	if ReasonNames()[0] != (Reason{ReasonGPUIdle, "idle"}) {
		t.Fatal("modifying ReasonNames() changed the reason names")
	}
	if s := ReasonString(ReasonGPUIdle | ReasonHWThermalSlowdown); s != "idle+hw_thermal" {
		t.Fatalf("ReasonString = %q", s)
	}
	if s := ReasonString(0); s != "none" {
		t.Fatalf("ReasonString(0) = %q", s)
	}
}

// BenchmarkGet measures what a copy-out Get costs against the pointer into
// the shared table that Get used to return (the baseline, in the same run),
// and what a per-record path pays that keeps its own copy of All().
func BenchmarkGet(b *testing.B) {
	c := Default()
	ids := []MetricID{MetricPowerDraw, MetricUtilGPU, MetricClockSM, MetricTempGPU}
	b.Run("pointer-baseline", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for i := 0; b.Loop(); i++ {
			id := ids[i&3]
			if id != 0 && int(id) < len(c.metrics) {
				m := &c.metrics[id]
				n += len(m.Influx().Name)
			}
		}
		sink = n
	})
	b.Run("own-table", func(b *testing.B) { // All() copied once, as hot paths keep it
		b.ReportAllocs()
		t := c.All()
		var n int
		for i := 0; b.Loop(); i++ {
			if id := ids[i&3]; id != 0 && int(id) <= len(t) {
				n += len(t[id-1].Influx().Name)
			}
		}
		sink = n
	})
	b.Run("copy", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for i := 0; b.Loop(); i++ {
			if m, ok := c.Get(ids[i&3]); ok {
				n += len(m.Influx().Name)
			}
		}
		sink = n
	})
}

var sink int
