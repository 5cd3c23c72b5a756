package jsonl

import (
	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// appendProcess writes one per-process event as
// {"type":"process","time":T,"host":..,"gpu":N,"uuid":..,"pid":P,
// "name":..,"process_type":..,"used_memory_mib":..,"sm_util":..,...}: the
// event's fields as numbers, name and process type ("C", "G", "C+G") and,
// when enabled, "cmdline".
func (e *Encoder) appendProcess(ev record.Event) {
	// A process's own attribution replaces its device's.
	var own *record.Attribution
	if a, ok := record.ProcessAttribution(ev); ok {
		own = &a
	}
	b, d, known := e.appendHeadAttributed(e.buf, `{"type":"process","time":`, ev.StartNS, ev.Device, own)
	for _, f := range ev.Fields {
		b = append(b, ',')
		b = appendField(b, f)
	}
	for _, a := range ev.Attrs {
		if record.IsAttributionKey(a.Key) {
			continue // in the head
		}
		key := a.Key
		if key == record.ProcessAttrType {
			key = "process_type" // "type" names the record
		}
		b = append(b, ',')
		b = appendAttr(b, key, a.Value)
	}
	if known && d.Simulated {
		b = append(b, `,"simulated":true`...)
	}
	b = append(b, e.tagJSON...)
	e.buf = append(b, "}\n"...)
}

// appendField writes "key":value for an event's field: an integer when the
// field is Int, else a float (null when not finite).
func appendField(b []byte, f record.Field) []byte {
	b = appendString(b, f.Key)
	b = append(b, ':')
	t := catalog.Float
	if f.Int {
		t = catalog.Int
	}
	return AppendNumber(b, f.Value, t)
}

// appendAttr writes "key":"value" for an event's attribute.
func appendAttr(b []byte, key, value string) []byte {
	b = appendString(b, key)
	b = append(b, ':')
	return appendString(b, value)
}

// appendJob writes a per-job account (record.EventJob, record.EventJobEnd)
// as {"type":"job"|"job_end","time":...,"host":...,"gpu":N,"uuid":...,
// the owner's attribution,"owner":...,"started":...,"fields":{...}}.
func (e *Encoder) appendJob(ev record.Event) {
	owner, _ := record.ProcessAttribution(ev) // the attribution keys of its Attrs
	b, d, known := e.appendHeadAttributed(e.buf, `{"type":"`+string(ev.Kind)+`","time":`, ev.StartNS, ev.Device, &owner)
	for _, a := range ev.Attrs {
		if !record.IsAttributionKey(a.Key) {
			b = append(b, ',')
			b = appendAttr(b, a.Key, a.Value)
		}
	}
	b = appendFields(b, ev.Fields)
	if known && d.Simulated {
		b = append(b, `,"simulated":true`...)
	}
	b = append(b, e.tagJSON...)
	e.buf = append(b, "}\n"...)
}
