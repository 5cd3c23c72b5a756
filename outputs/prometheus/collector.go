package prometheus

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Names of the series every naming scheme adds to the catalog's.
const (
	nameUp                           = "gpusampler_device_up"
	nameLastSample                   = "gpusampler_device_last_sample_timestamp_seconds"
	nameSlowdownTemp                 = "gpusampler_gpu_slowdown_temp_celsius"
	nameShutdownTemp                 = "gpusampler_gpu_shutdown_temp_celsius"
	nameMaxOpTemp                    = "gpusampler_gpu_max_operating_temp_celsius"
	nameMemoryMaxTemp                = "gpusampler_memory_max_temp_celsius"
	nameXIDTotal                     = "gpusampler_xid_errors_total"
	nameXIDLastDCGM                  = "DCGM_FI_DEV_XID_ERRORS"
	nameXIDLastProm                  = "gpusampler_xid_last_code"
	windowMin, windowMax, windowMean = "_min", "_max", "_mean"
)

// Window family suffixes, in descSet.win order.
var windowSuffixes = [3]string{windowMin, windowMax, windowMean}

// deviceLabels are the labels of every device series before the global
// tags: dcgm-exporter's, in its order, under NamingDCGM; snake_case ones
// under NamingPrometheus.
func deviceLabels(naming, hostLabel string) []string {
	if naming == NamingPrometheus {
		return []string{"gpu", "uuid", "pci_bus_id", "device", "model_name", hostLabel}
	}
	return []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", hostLabel}
}

// descSet holds one device's descriptors: they carry its label names, which
// differ between devices only by the MIG, simulated and attribution labels.
type descSet struct {
	// pairs are the label pairs of every series of the device, sorted by
	// name; seriesPairs those of series with a constant label (nil: pairs).
	// They are built once per identity and shared, read-only, by scrapes.
	pairs                                 []*dto.LabelPair
	seriesPairs                           [][]*dto.LabelPair
	metric                                []*prometheus.Desc // by series index
	win                                   [][3]*prometheus.Desc
	up, lastSample                        *prometheus.Desc
	slowdown, shutdown, maxOp, memMaxTemp *prometheus.Desc
	xidLast, xidTotal                     *prometheus.Desc
}

// migIdentity returns a MIG instance's profile and GPU instance id, the
// GPU_I_PROFILE and GPU_I_ID labels dcgm-exporter puts on MIG series.
func migIdentity(d record.Device) (profile, instance string, ok bool) {
	if !d.MIG {
		return "", "", false
	}
	return d.MIGProfile, strconv.Itoa(d.GPUInstanceID), true
}

// setLabels computes d's label values and descriptors from its identity.
func (o *Output) setLabels(d *deviceState) {
	id := &d.id
	idx := strconv.Itoa(id.Index)
	if id.MIG {
		// As dcgm-exporter: gpu and device name the physical GPU; the
		// instance is told apart by GPU_I_ID (and its own UUID).
		idx = strconv.Itoa(id.Parent)
	}
	names := append([]string(nil), o.baseLabels...)
	values := append(make([]string, 0, len(names)+3), idx, id.UUID, id.PCIBusID, "nvidia"+idx, id.Name, o.opts.Host)
	values = append(values, o.tagValues...)
	if profile, instance, ok := migIdentity(*id); ok {
		names = append(names, "GPU_I_PROFILE", "GPU_I_ID")
		values = append(values, profile, instance)
	}
	if id.Simulated {
		names = append(names, "simulated")
		values = append(values, "true")
	}
	// Attribution labels (dcgm-exporter's pod, namespace, container,
	// hpc_job), each present only when set. A change arrives as a new
	// identity: the old label set is gone from the next scrape on.
	for _, a := range id.Attribution.Attrs() {
		if slices.Contains(names, a.Key) {
			continue // a global tag of that name wins
		}
		names = append(names, a.Key)
		values = append(values, a.Value)
	}
	d.labels = values
	ds := &descSet{metric: make([]*prometheus.Desc, len(o.series)), win: make([][3]*prometheus.Desc, len(o.series)),
		seriesPairs: make([][]*dto.LabelPair, len(o.series)), pairs: labelPairs(names, values)}
	for i := range o.series {
		s := &o.series[i]
		var constLabels prometheus.Labels
		if s.label[0] != "" {
			constLabels = prometheus.Labels{s.label[0]: s.label[1]}
			ds.seriesPairs[i] = labelPairs(append(slices.Clone(names), s.label[0]), append(slices.Clone(values), s.label[1]))
		}
		ds.metric[i] = prometheus.NewDesc(s.name, s.help, names, constLabels)
		if s.window {
			m, _ := o.cat.Get(s.id) // s.id is from o.cat
			for k, suffix := range windowSuffixes {
				help := "The " + strings.TrimPrefix(suffix, "_") + " of every sample of " + m.Name +
					" in the newest " + o.opts.Window.String() + " (a sliding window ending at its newest sample)."
				ds.win[i][k] = prometheus.NewDesc(s.winName+suffix, help, names, nil)
			}
		}
	}
	ds.up = prometheus.NewDesc(nameUp, "1 when the device produced a sample within the staleness limit ("+
		o.opts.Stale.String()+"), 0 when it did not or was lost; its other series are then absent.", names, nil)
	ds.lastSample = prometheus.NewDesc(nameLastSample, "Own time of the device's newest sample (Unix seconds).", names, nil)
	ds.slowdown = prometheus.NewDesc(nameSlowdownTemp, "GPU temperature at which the device slows down, as it reports it; the field guide's generic critical 90 °C when it does not.", names, nil)
	ds.shutdown = prometheus.NewDesc(nameShutdownTemp, "GPU temperature at which the device shuts down (present when the device reports it).", names, nil)
	ds.maxOp = prometheus.NewDesc(nameMaxOpTemp, "Maximum operating GPU temperature (present when the device reports it).", names, nil)
	ds.memMaxTemp = prometheus.NewDesc(nameMemoryMaxTemp, "Maximum memory (HBM) temperature, as the device reports it; the field guide's generic critical 105 °C when it does not.", names, nil)
	if o.opts.Naming == NamingDCGM {
		ds.xidLast = prometheus.NewDesc(nameXIDLastDCGM, "Value of the last XID error encountered.", names, nil)
	} else {
		ds.xidLast = prometheus.NewDesc(nameXIDLastProm, "Code of the last XID error (0: none yet).", names, nil)
	}
	ds.xidTotal = prometheus.NewDesc(nameXIDTotal, "XID errors seen since gpusampler started (every event counted).", names, nil)
	d.descs = ds
}

// collector builds every metric at scrape time from the Output's state.
// It is unchecked (Describe sends nothing): series come and go with devices.
type collector struct{ o *Output }

// Describe implements prometheus.Collector.
func (collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector. It holds the Output's read lock.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	o := c.o
	now := o.now().UnixNano()
	o.mu.RLock()
	defer o.mu.RUnlock()
	stale, span, avg := int64(o.opts.Stale), int64(o.opts.Window), int64(powerAverage)
	for _, d := range o.devices {
		if d == nil {
			continue
		}
		ds, lv := d.descs, d.descs.pairs
		fresh := o.fresh(d, now)
		up := 0.0
		if fresh {
			up = 1
		}
		emit(ch, ds.up, prometheus.GaugeValue, up, lv)
		if d.newestT > 0 {
			emit(ch, ds.lastSample, prometheus.GaugeValue, float64(d.newestT)/1e9, lv)
		}
		if !fresh {
			continue
		}
		emit(ch, ds.slowdown, prometheus.GaugeValue, orDefault(d.id.SlowdownTempC, catalog.GenericGPUTempCritC), lv)
		emit(ch, ds.memMaxTemp, prometheus.GaugeValue, orDefault(d.id.MemoryMaxTempC, catalog.GenericMemoryTempCritC), lv)
		if d.id.ShutdownTempC > 0 {
			emit(ch, ds.shutdown, prometheus.GaugeValue, d.id.ShutdownTempC, lv)
		}
		if d.id.MaxOperatingTempC > 0 {
			emit(ch, ds.maxOp, prometheus.GaugeValue, d.id.MaxOperatingTempC, lv)
		}
		emit(ch, ds.xidLast, prometheus.GaugeValue, d.lastXID, lv)
		emit(ch, ds.xidTotal, prometheus.CounterValue, float64(d.xidCount), lv)
		for i := range o.series {
			s := &o.series[i]
			ms := &d.metrics[s.id]
			if !ms.has || now-ms.arrive > ms.keep(stale) {
				continue
			}
			v := ms.last
			if s.avg1s {
				if _, _, mean, ok := ms.win.stats(avg); ok {
					v = mean
				}
			}
			v *= s.scale
			if s.round {
				v = math.Round(v)
			}
			vt := prometheus.GaugeValue
			if s.kind == catalog.Counter {
				vt = prometheus.CounterValue
			}
			sp := ds.seriesPairs[i]
			if sp == nil {
				sp = lv
			}
			emit(ch, ds.metric[i], vt, v, sp)
			if s.window {
				if lo, hi, mean, ok := ms.win.stats(span); ok {
					emit(ch, ds.win[i][0], prometheus.GaugeValue, lo*s.winScale, lv)
					emit(ch, ds.win[i][1], prometheus.GaugeValue, hi*s.winScale, lv)
					emit(ch, ds.win[i][2], prometheus.GaugeValue, mean*s.winScale, lv)
				}
			}
		}
	}
	o.collectSelf(ch, now)
	o.collectJobs(ch, now)
}

// emit sends one sample of desc with the given (cached, sorted) label
// pairs.
func emit(ch chan<- prometheus.Metric, desc *prometheus.Desc, vt prometheus.ValueType, v float64, pairs []*dto.LabelPair) {
	ch <- &constMetric{desc: desc, pairs: pairs, vt: vt, v: v}
}

// constMetric is prometheus.NewConstMetric without building label pairs
// per scrape: it carries the device's cached pairs (one allocation per
// series instead of one per label).
type constMetric struct {
	desc  *prometheus.Desc
	pairs []*dto.LabelPair
	vt    prometheus.ValueType
	v     float64
	g     dto.Gauge
	c     dto.Counter
}

// Desc implements prometheus.Metric.
func (m *constMetric) Desc() *prometheus.Desc { return m.desc }

// Write implements prometheus.Metric. The label pairs are shared with
// other scrapes and must not be modified (the registry does not).
func (m *constMetric) Write(out *dto.Metric) error {
	out.Label = m.pairs
	if m.vt == prometheus.CounterValue {
		m.c.Value = &m.v
		out.Counter = &m.c
	} else {
		m.g.Value = &m.v
		out.Gauge = &m.g
	}
	return nil
}

// labelPairs returns names and values as label pairs sorted by name.
func labelPairs(names, values []string) []*dto.LabelPair {
	out := make([]*dto.LabelPair, len(names))
	for i := range names {
		out[i] = &dto.LabelPair{Name: &names[i], Value: &values[i]}
	}
	slices.SortFunc(out, func(a, b *dto.LabelPair) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out
}

func orDefault(v, def float64) float64 {
	if v > 0 {
		return v
	}
	return def
}
