package buffer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gpusampler/gpusampler/record"
)

// lockedBuffer is a bytes.Buffer safe for the buffer's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The logger handed in already names the output (as the agent hands every
// wrapper one); the buffer adds its kind, not the name a second time.
func TestLogLinesNameTheOutputOnce(t *testing.T) {
	for _, kind := range []string{KindMemory, KindDisk} {
		t.Run(kind, func(t *testing.T) {
			sink := &fakeSink{script: func(_ int, b *record.Batch) error {
				if b.Seq == 2 {
					return record.Permanent(errors.New("sink: 400 field type conflict"))
				}
				return nil
			}}
			var out lockedBuffer
			log := slog.New(slog.NewTextHandler(&out, nil)).With("output", "influxdb")
			env := kindEnv{kind: kind}
			b := env.newBuffer(t, sink, Config{}, WithLogger(log), withClock(newFakeClock().Now))
			for seq := uint64(1); seq <= 3; seq++ {
				if err := b.Write(context.Background(), testBatch(seq, 2)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) == 0 || lines[0] == "" {
				t.Fatal("the buffer logged nothing for a malformed batch")
			}
			for _, l := range lines {
				if n := strings.Count(l, " output="); n != 1 || !strings.Contains(l, " output=influxdb") {
					t.Errorf("log line has %d output attributes, want one, output=influxdb: %s", n, l)
				}
				if !strings.Contains(l, "buffer="+kind) {
					t.Errorf("log line lacks buffer=%s: %s", kind, l)
				}
			}
		})
	}
}
