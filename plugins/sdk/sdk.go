// Package sdk serves a gpusampler output from a plugin process. A plugin
// author implements record.Output — optionally Configurer, to take a
// config block, rpc's HealthChecker (a Health method), to report its
// sink's state, and record.StatsReporter (a ReportStats method), whose
// counters reach the host with every health probe and become its
// self-metrics (scope output_detail) — and calls Serve from main:
//
//	func main() { sdk.Serve(mysink.New()) }
//
// The plugin logs through Env.Logger (JSON lines on stderr, which the host
// logs under the output's name). It must never write to stdout: stdout
// carries the go-plugin handshake. The SDK exits the process when the host
// goes away (parent watch), even if the host was killed with SIGKILL.
package sdk

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/plugins/internal/rpc"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/record"
)

// Env is what the host tells a plugin about its output: name, kind, host
// name, global tags, a logger and the metric catalog.
type Env = rpc.Env

// Factory builds a plugin's output from its config block: it reads keys
// with t's getters, reports bad ones with t.Errorf (they reach the user as
// file:line errors of the host's config), and calls t.Finish when done so
// that unknown keys are reported. A returned error refuses the block as a
// whole. Factory must not start network activity when t holds errors.
type Factory = rpc.Factory

// Configurer is implemented by outputs that take a config block. Configure
// is called once, before any Write, with the block under
// [outputs.plugin.config]; the SDK calls t.Finish afterwards.
type Configurer interface {
	Configure(t *config.Table, env Env) error
}

// HealthChecker is implemented by outputs that can tell whether their sink
// works. Health must answer within the host's health timeout (1 s by
// default); an error is logged by the host but does not restart the
// plugin — only a plugin that does not answer at all is restarted.
type HealthChecker = rpc.HealthChecker

// Serve serves out until the host goes away, then returns (main returns
// and the process exits). If out implements Configurer it receives the
// config block; otherwise any key in the block is an error.
func Serve(out record.Output) {
	ServeFactory(OutputFactory(out))
}

// OutputFactory is the Factory Serve uses for out.
func OutputFactory(out record.Output) Factory {
	return func(t *config.Table, env Env) (record.Output, error) {
		if c, ok := out.(Configurer); ok {
			if err := c.Configure(t, env); err != nil {
				return nil, err
			}
		}
		t.Finish()
		return out, nil
	}
}

// ServeKind serves a built-in config kind out of process: the block is
// decoded with the kind's Parse and the output made with its Build, as
// in process. gpusampler's hidden `plugin serve KIND` command calls it.
func ServeKind(k outputs.Kind) {
	ServeFactory(KindFactory(k))
}

// KindFactory is the Factory ServeKind uses for k.
func KindFactory(k outputs.Kind) Factory {
	return func(t *config.Table, env Env) (record.Output, error) {
		o := &outputs.Block{Kind: k.Kind, Name: env.Name, Raw: t.Raw()}
		if k.Parse != nil {
			o.Options = k.Parse(t)
		}
		t.Finish()
		if t.Err() != nil {
			return nil, nil
		}
		if k.Build == nil {
			return nil, fmt.Errorf("output kind %s cannot be built", k.Kind)
		}
		return k.Build(o, outputs.BuildEnv{Host: env.Host, GlobalTags: env.GlobalTags, Logger: env.Logger,
			Catalog: env.Catalog})
	}
}

// ServeFactory serves the output f builds.
func ServeFactory(f Factory) {
	logger := Logger()
	srv := rpc.NewServer(f, logger)
	go func() {
		// After Close the host ends the connection; if it does not, exit
		// on our own.
		<-srv.Done()
		time.Sleep(5 * time.Second)
		os.Exit(0)
	}()
	serve(srv, logger)
}

// ServeKinds serves several built-in kinds from one process: every output
// the host configures in it is an instance of its own (its calls name it),
// built by the kind its Configure names, and closed on its own; the
// process serves until the host ends it. gpusampler's hidden `plugin
// serve` command (without a kind) calls it for every out-of-process kind.
func ServeKinds(kinds ...outputs.Kind) {
	byKind := make(map[string]Factory, len(kinds))
	for _, k := range kinds {
		byKind[k.Kind] = KindFactory(k)
	}
	f := func(t *config.Table, env Env) (record.Output, error) {
		kf := byKind[env.Kind]
		if kf == nil {
			return nil, fmt.Errorf("output kind %q is not served by this process", env.Kind)
		}
		return kf(t, env)
	}
	logger := Logger()
	serve(rpc.NewMuxServer(f, logger), logger)
}

func serve(impl proto.OutputServer, logger *slog.Logger) {
	go watchParent(logger)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: rpc.Handshake,
		Plugins:         plugin.PluginSet{rpc.PluginName: &rpc.GRPCPlugin{Impl: impl}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, rpc.ServerOptions()...)...)
		},
		Logger: hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Info,
			Name: "go-plugin"}),
	})
}

// Logger returns the logger a plugin should use: JSON lines on stderr in
// the form go-plugin's host decodes (@level, @message), so each record
// reaches the host's log with its level and attributes.
func Logger() *slog.Logger {
	h := slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				// the form go-plugin's host decodes: the record keeps its time
				return slog.String("@timestamp", a.Value.Time().UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				lv, _ := a.Value.Any().(slog.Level)
				name := "info"
				switch {
				case lv < slog.LevelInfo:
					name = "debug"
				case lv >= slog.LevelError:
					name = "error"
				case lv >= slog.LevelWarn:
					name = "warn"
				}
				return slog.String("@level", name)
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		}})
	return slog.New(h)
}

// watchParent exits the process when the host that started it is gone:
// the parent pid changes (re-parented to init or a subreaper) or differs
// from the pid the host passed in the environment.
func watchParent(logger *slog.Logger) {
	want := os.Getppid()
	if s := os.Getenv(rpc.ParentPIDEnv); s != "" {
		if pid, err := strconv.Atoi(s); err == nil {
			want = pid
		}
	}
	for {
		if os.Getppid() != want {
			logger.Warn("host process is gone; exiting", "host_pid", want)
			os.Exit(1)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
