package main

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/internal/pipeline/deadletter"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordtest"
)

// refuser refuses every batch as permanent.
type refuser struct{}

func (refuser) Write(context.Context, *record.Batch) error {
	return record.Permanent(errors.New("HTTP 400: field type conflict"))
}
func (refuser) Close() error { return nil }

// `gpusampler deadletter FILE` prints each refused batch: a header line,
// then its records as the stdout output's json format prints them.
func TestDeadLetterPrint(t *testing.T) {
	file := filepath.Join(t.TempDir(), "influxdb.deadletter")
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	o, err := deadletter.New(refuser{}, deadletter.Options{File: file, Output: "influxdb", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	b := recordtest.FullBatch()
	o.Write(context.Background(), b)
	b2 := recordtest.FullBatch()
	b2.Samples = b2.Samples[:1]
	o.Write(context.Background(), b2)
	o.Close()
	var sizes []int
	if err := deadletter.ReadFile(file, func(e *deadletter.Entry) error { sizes = append(sizes, e.Bytes); return nil }); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "deadletter", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var want strings.Builder
	for i, batch := range []*record.Batch{b, b2} {
		want.WriteString(`{"type":"dead_letter","time":"2026-12-02T06:00:00Z","output":"influxdb","error":"HTTP 400: field type conflict","records":` +
			strconv.Itoa(batch.Len()) + `,"bytes":` + strconv.Itoa(sizes[i]) + "}\n")
		enc := jsonl.New(jsonl.Options{})
		enc.Encode(batch)
		want.Write(enc.Bytes())
	}
	if out != want.String() {
		t.Fatalf("output\n%s\nwant\n%s", out, want.String())
	}
	if code, _, errs := runCLI(t, "deadletter"); code != 2 || !strings.Contains(errs, "want one dead-letter file") {
		t.Fatalf("no file: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, "deadletter", file+".missing"); code != 1 || !strings.Contains(errs, file+".missing") {
		t.Fatalf("missing file: exit %d, %s", code, errs)
	}
}
