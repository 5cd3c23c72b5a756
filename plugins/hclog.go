package plugins

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// slogHCLog adapts a *slog.Logger to hclog.Logger, the logger go-plugin
// writes its own messages and each plugin's stderr lines to. A plugin built
// with the SDK writes JSON lines that go-plugin decodes into level, message
// and attributes, so they arrive here as structured records under the
// output's name.
type slogHCLog struct {
	l     *slog.Logger
	name  string
	level *slog.LevelVar
	args  []any
}

func newHCLog(l *slog.Logger) hclog.Logger {
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelDebug)
	return &slogHCLog{l: l, level: lv}
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
	// hclog args are key/value pairs like slog's.
	all := append(append([]any(nil), h.args...), args...)
	if h.name != "" {
		all = append(all, "plugin_logger", h.name)
	}
	h.l.Log(context.Background(), lv, msg, all...)
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
