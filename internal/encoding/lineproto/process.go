package lineproto

import (
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/gpusampler/gpusampler/record"
)

// ProcessMeasurement is where per-process events go, in the shape of
// Telegraf's nvidia_smi process measurement: tags name and type (plus host,
// index, uuid, simulated and global tags), fields pid and used_memory (MiB,
// integers), and our utilization fields sm_util, mem_util, enc_util and
// dec_util (percent, integers) when the driver had a sample. A command line
// (opt-in) is a string field, never a tag; so is the PID (cardinality).
const ProcessMeasurement = "nvidia_smi_process"

// processFieldName maps sampler process field keys to line-protocol field
// names (Telegraf's used_memory for used_memory_mib).
func processFieldName(key string) string {
	if key == record.ProcessFieldUsedMemory {
		return "used_memory"
	}
	return key
}

// encodeProcess writes one EventProcess event.
func (e *Encoder) encodeProcess(ev record.Event) {
	dt := e.device(ev.Device)
	tags := e.eventTags(ev.Device, dt)
	// A process's own attribution replaces its device's.
	if a, ok := record.ProcessAttribution(ev); ok {
		for _, x := range a.Attrs() {
			tags = append(tags, Tag(x))
		}
	} else {
		tags = append(tags, attributionTags(dt.dev)...)
	}
	var cmdline string
	for _, a := range ev.Attrs {
		switch a.Key {
		case record.ProcessAttrName, record.ProcessAttrType:
			if a.Value != "" {
				tags = append(tags, Tag(a))
			}
		case record.ProcessAttrCmdline:
			cmdline = a.Value
		}
	}
	e.startLine(ProcessMeasurement, tags)
	e.addNumberFields(ev.Fields, processFieldName)
	if cmdline != "" {
		if v, ok := lineprotocol.StringValue(cmdline); ok {
			e.enc.AddField("cmdline", v)
		}
	}
	e.enc.EndLine(time.Unix(0, ev.StartNS))
}

// JobMeasurement is where per-job accounts go (record.EventJob and
// record.EventJobEnd, package internal/accounting): tags host, index, uuid,
// simulated, global tags, owner and the owner's attribution (pod,
// namespace, container, hpc_job), plus ended=true on the job-end line;
// fields the account's cumulative figures (energy_j, busy_s, ...) and
// started (the account's start, RFC 3339).
const JobMeasurement = "gpusampler_job"

// encodeJob writes one EventJob or EventJobEnd event.
func (e *Encoder) encodeJob(ev record.Event) {
	dt := e.device(ev.Device)
	tags := e.eventTags(ev.Device, dt)
	var started string
	for _, a := range ev.Attrs {
		switch {
		case a.Key == record.AttrJobStarted:
			started = a.Value
		case a.Value != "":
			tags = append(tags, Tag(a))
		}
	}
	if ev.Kind == record.EventJobEnd {
		tags = append(tags, Tag{"ended", "true"})
	}
	e.startLine(JobMeasurement, tags)
	e.addNumberFields(ev.Fields, nil)
	if v, ok := lineprotocol.StringValue(started); ok && started != "" {
		e.enc.AddField("started", v)
	}
	e.enc.EndLine(time.Unix(0, ev.StartNS))
}
