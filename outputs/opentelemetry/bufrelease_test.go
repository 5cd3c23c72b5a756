package opentelemetry

import (
	"context"
	"errors"
	"testing"
)

// heldExporter fails its first export and keeps the body it was handed,
// as a transport still sending a timed-out request does.
type heldExporter struct {
	calls  int
	bodies [][]byte
}

func (h *heldExporter) export(_ context.Context, body []byte) (int64, string, error) {
	h.calls++
	h.bodies = append(h.bodies, body)
	if h.calls == 1 {
		return 0, "", context.DeadlineExceeded
	}
	return 0, "", nil
}
func (h *heldExporter) target() string { return "held" }
func (h *heldExporter) close()         {}

// After a failed export the next Write encodes into a new buffer: the
// body of the failed request, which its transport may still be reading,
// is never rewritten. A successful export's buffer is reused.
func TestFailedExportBodyNotRewritten(t *testing.T) {
	o, err := New(Options{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	h := &heldExporter{}
	o.ex = []exporter{h}
	b := benchBatch(false)
	if err := o.Write(context.Background(), b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first Write = %v, want the deadline error", err)
	}
	failed := string(h.bodies[0])
	b2 := *b
	b2.Seq++
	b2.Samples = b.Samples[len(b.Samples)/2:]
	for range 2 {
		if err := o.Write(context.Background(), &b2); err != nil {
			t.Fatal(err)
		}
		b2.Seq++
	}
	if string(h.bodies[0]) != failed {
		t.Fatal("the failed request's body was rewritten by the next encode")
	}
	if &h.bodies[1][0] == &h.bodies[0][0] {
		t.Fatal("the Write after a failed export encoded into the failed request's buffer")
	}
	if &h.bodies[2][0] != &h.bodies[1][0] {
		t.Error("the buffer of a successful export was not reused")
	}
}
