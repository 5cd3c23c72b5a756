package plugins

import (
	"cmp"
	"context"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// slogHCLog adapts a *slog.Logger to hclog.Logger, the logger go-plugin
// writes its own messages and each plugin's stderr lines to. A plugin built
// with the SDK writes JSON lines that go-plugin decodes into level, message
// and attributes, so they arrive here as structured records under the
// output's name.
//
// Records are tidied on the way: the "timestamp" go-plugin adds to a
// plugin's line becomes the record's time (the zero time an SDK plugin
// sends is dropped: the record keeps the time it arrived); an "output"
// attribute from the plugin is dropped (the host's logger carries it);
// a call's attributes are sorted by key (a shared process's "output"
// first), since go-plugin hands a plugin's attributes over in map order;
// the executable shows as its real path, not the /proc/self/fd/N it is
// started through; and go-plugin's "plugin process exited" is logged at
// debug level (the supervisor logs unexpected exits itself, and
// replacements, refusals and shutdowns are expected).
type slogHCLog struct {
	l     *slog.Logger
	path  string // the plugin executable, shown for /proc/self/fd/N
	name  string
	level *slog.LevelVar
	args  []any
	// keepOutput keeps the plugin's "output" attribute: a shared process
	// serves several outputs and its lines name theirs.
	keepOutput bool
}

func newHCLog(l *slog.Logger, path string) hclog.Logger {
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelDebug)
	return &slogHCLog{l: l, path: path, level: lv}
}

// The plugin log rate limit: a plugin process's stderr lines reach the
// host's log at LogRate lines a second on average, in bursts of up to
// LogBurst; the lines over it are dropped and counted (Stats.LogDropped,
// plugin_log_dropped), and the first drop is logged once. A plugin that
// floods its log costs the host a scan of each line for its end (the lines
// over the limit are dropped before go-plugin decodes them), not decoding
// and writing them out.
const (
	LogRate  = 100
	LogBurst = 1000
)

// logLimit is a token bucket over one plugin process's log lines, shared by
// the hclog copies go-plugin derives and kept across the process's
// restarts. Drops are counted by the output a line names (a shared
// process's lines name theirs; "" for the others). Safe for concurrent use.
type logLimit struct {
	now func() time.Time

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped map[string]uint64
	said    bool
}

func newLogLimit(now func() time.Time) *logLimit {
	if now == nil {
		now = time.Now
	}
	return &logLimit{now: now, tokens: LogBurst, dropped: map[string]uint64{}}
}

// allow takes a line's token; without one the line is counted dropped
// under output, and first reports the first drop (to be said once).
func (l *logLimit) allow(output string) (ok, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if d := now.Sub(l.last); !l.last.IsZero() && d > 0 {
		l.tokens = min(LogBurst, l.tokens+d.Seconds()*LogRate)
	}
	l.last = now
	if l.tokens >= 1 {
		l.tokens--
		return true, false
	}
	l.dropped[output]++
	first, l.said = !l.said, true
	return false, first
}

// droppedFor returns the lines dropped that named output.
func (l *logLimit) droppedFor(output string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped[output]
}

// total returns every line dropped.
func (l *logLimit) total() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n uint64
	for _, d := range l.dropped {
		n += d
	}
	return n
}

func toSlog(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (h *slogHCLog) Log(level hclog.Level, msg string, args ...interface{}) {
	lv := toSlog(level)
	if level == hclog.Off || lv < h.level.Level() {
		return
	}
	if h.name == "" && msg == "plugin process exited" {
		lv = slog.LevelDebug
	}
	if !h.l.Enabled(context.Background(), lv) {
		return
	}
	r := slog.NewRecord(time.Now(), lv, msg, 0)
	// hclog args are key/value pairs like slog's.
	all := append(append([]any(nil), h.args...), inOrder(args)...)
	for i := 0; i+1 < len(all); i += 2 {
		key, _ := all[i].(string)
		v := all[i+1]
		switch key {
		case "timestamp":
			if s, ok := v.(string); ok {
				if t, err := time.Parse(hclog.TimeFormat, s); err == nil && t.Year() > 1 {
					r.Time = t
				}
			}
			continue
		case "output":
			if !h.keepOutput {
				continue
			}
		}
		if s, ok := v.(string); ok && strings.HasPrefix(s, "/proc/self/fd/") && h.path != "" {
			v = h.path
		}
		r.Add(all[i], v)
	}
	if len(all)%2 == 1 {
		r.Add(all[len(all)-1])
	}
	_ = h.l.Handler().Handle(context.Background(), r)
}

// inOrder returns the key/value pairs of args with "output" first and the
// others sorted by key. go-plugin decodes a plugin's JSON line into a map,
// so its attributes arrive in a random order; sorted, the same line always
// reads the same (and a reader, or a test, finds "output=NAME" right after
// the message, as in the host's own lines).
func inOrder(args []any) []any {
	n := len(args) / 2
	pairs := make([][2]any, n)
	for i := range n {
		pairs[i] = [2]any{args[2*i], args[2*i+1]}
	}
	rank := func(p [2]any) (int, string) {
		k, _ := p[0].(string)
		if k == "output" {
			return 0, k
		}
		return 1, k
	}
	slices.SortStableFunc(pairs, func(a, b [2]any) int {
		ra, ka := rank(a)
		rb, kb := rank(b)
		return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(ka, kb))
	})
	out := make([]any, 0, len(args))
	for _, p := range pairs {
		out = append(out, p[0], p[1])
	}
	if len(args)%2 == 1 {
		out = append(out, args[len(args)-1])
	}
	return out
}

func (h *slogHCLog) Trace(msg string, args ...interface{}) { h.Log(hclog.Trace, msg, args...) }
func (h *slogHCLog) Debug(msg string, args ...interface{}) { h.Log(hclog.Debug, msg, args...) }
func (h *slogHCLog) Info(msg string, args ...interface{})  { h.Log(hclog.Info, msg, args...) }
func (h *slogHCLog) Warn(msg string, args ...interface{})  { h.Log(hclog.Warn, msg, args...) }
func (h *slogHCLog) Error(msg string, args ...interface{}) { h.Log(hclog.Error, msg, args...) }

func (h *slogHCLog) enabled(l hclog.Level) bool {
	return h.l.Enabled(context.Background(), toSlog(l)) && toSlog(l) >= h.level.Level()
}
func (h *slogHCLog) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *slogHCLog) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *slogHCLog) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *slogHCLog) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *slogHCLog) IsError() bool { return h.enabled(hclog.Error) }

func (h *slogHCLog) ImpliedArgs() []interface{} { return h.args }

func (h *slogHCLog) With(args ...interface{}) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}

func (h *slogHCLog) Name() string { return h.name }

func (h *slogHCLog) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (h *slogHCLog) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

func (h *slogHCLog) SetLevel(level hclog.Level) { h.level.Set(toSlog(level)) }

func (h *slogHCLog) GetLevel() hclog.Level {
	switch l := h.level.Level(); {
	case l < slog.LevelDebug:
		return hclog.Trace
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	}
	return hclog.Error
}

func (h *slogHCLog) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo)
}

func (h *slogHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo).Writer()
}
