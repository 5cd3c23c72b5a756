package plugins

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// A plugin's line reaches the host with its attributes in go-plugin's map
// order; every order is logged the same: the shared process's "output"
// first, the others by key.
func TestRelayedAttributesInOneOrder(t *testing.T) {
	orders := [][]any{
		{"output", "prometheus", "address", "127.0.0.1:9", "http2", false},
		{"address", "127.0.0.1:9", "output", "prometheus", "http2", false},
		{"http2", false, "address", "127.0.0.1:9", "output", "prometheus"},
	}
	for _, args := range orders {
		var buf bytes.Buffer
		l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
		h := newHCLog(l.With("host", "h1"), "").(*slogHCLog)
		h.keepOutput = true
		h.Log(hclog.Info, "Listening on", args...)
		if got, want := buf.String(), "level=INFO msg=\"Listening on\" host=h1 output=prometheus address=127.0.0.1:9 http2=false\n"; got != want {
			t.Errorf("args %v logged\n%q, want\n%q", args, got, want)
		}
	}
}
