package nats

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// Encodings.
const (
	EncodingJSON     = "json"     // JSON Lines (internal/encoding/jsonl)
	EncodingInflux   = "influx"   // line protocol (internal/encoding/lineproto)
	EncodingProtobuf = "protobuf" // compact binary: one protobuf Batch (internal/encoding/protobuf)
)

// Encodings lists the encodings.
var Encodings = []string{EncodingJSON, EncodingInflux, EncodingProtobuf}

// Defaults.
const (
	DefaultServer          = "nats://127.0.0.1:4222"
	DefaultSubject         = "gpusampler.{host}.{gpu}.{group}"
	DefaultEventSubject    = "gpusampler.{host}.{gpu}.events"
	DefaultSelfSubject     = "gpusampler.{host}.self"
	DefaultStream          = "GPUSAMPLER"
	DefaultConnectTimeout  = 5 * time.Second
	DefaultReconnectWait   = 2 * time.Second
	DefaultReconnectBuffer = 8 << 20
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultMaxPending      = 4096
	DefaultAckTimeout      = 5 * time.Second
	// DefaultIdentityInterval bounds how long a consumer that subscribes
	// late waits for the identity (name, UUID, simulated mark) of a device.
	DefaultIdentityInterval = 10 * time.Second
	// MinIdentityInterval and MaxIdentityInterval bound identity_interval.
	MinIdentityInterval = 100 * time.Millisecond
	MaxIdentityInterval = time.Hour
)

// Config is one NATS output's settings as plain data (no connection). The
// field comments name the TOML keys.
type Config struct {
	// Servers: servers, URLs of one cluster.
	Servers []string
	// Encoding: encoding, one of Encodings.
	Encoding string
	// Subject, EventSubject, SelfSubject: subject, event_subject,
	// self_subject — templates (see the placeholders Ph*).
	Subject, EventSubject, SelfSubject string
	// GPU: gpu, what {gpu} renders: "uuid" (default) or "index".
	GPU string
	// MaxMessageBytes: max_message_bytes, a cap below the server's
	// max_payload (0: the server's).
	MaxMessageBytes int
	// ConnectTimeout, ReconnectWait: connect_timeout, reconnect_wait.
	ConnectTimeout, ReconnectWait time.Duration
	// ReconnectBufferBytes: reconnect_buffer_bytes, what is kept of
	// publishes while reconnecting (nats.go's ReconnectBufSize).
	ReconnectBufferBytes int
	// RetryOnFailedConnect: retry_on_failed_connect — start even when no
	// server answers (publishes are buffered) instead of failing.
	RetryOnFailedConnect bool
	// IdentityInterval: identity_interval — every subject's messages carry
	// the identity records of their device at least this often (and again
	// after a reconnect), so that a consumer that subscribed late learns
	// them. Default DefaultIdentityInterval.
	IdentityInterval time.Duration

	// Auth: username/password, token, nkey_seed_file, credentials_file.
	Username, Password, Token, NKeySeedFile, CredentialsFile string
	// TLS: tls_ca, tls_cert, tls_key, tls_server_name,
	// insecure_skip_verify.
	TLSCA, TLSCert, TLSKey, TLSServerName string
	InsecureSkipVerify                    bool

	// JetStream: jetstream — publish with acks (at-least-once).
	JetStream bool
	// Stream: stream, the stream the subjects go to.
	Stream string
	// CreateStream: create_stream — create (or update) the stream from the
	// stream_* keys at start.
	CreateStream bool
	// Stream settings for create_stream: stream_subjects (default: the
	// templates' literal prefixes + ">"), stream_storage ("file",
	// "memory"), stream_max_age, stream_max_bytes, stream_replicas,
	// duplicate_window (the de-duplication window, default 2m).
	StreamSubjects  []string
	StreamStorage   string
	StreamMaxAge    time.Duration
	StreamMaxBytes  int64
	StreamReplicas  int
	DuplicateWindow time.Duration
	// MaxPending: max_pending, async publishes in flight (awaiting acks).
	MaxPending int
	// AckTimeout: ack_timeout, how long one publish waits for its ack.
	AckTimeout time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Servers: []string{DefaultServer}, Encoding: EncodingJSON, Subject: DefaultSubject,
		EventSubject: DefaultEventSubject, SelfSubject: DefaultSelfSubject, GPU: "uuid",
		ConnectTimeout: DefaultConnectTimeout, ReconnectWait: DefaultReconnectWait, ReconnectBufferBytes: DefaultReconnectBuffer,
		Stream: DefaultStream, StreamStorage: "file", StreamReplicas: 1, DuplicateWindow: DefaultDuplicateWindow,
		MaxPending: DefaultMaxPending, AckTimeout: DefaultAckTimeout, IdentityInterval: DefaultIdentityInterval}
}

// problem is one invalid key.
type problem struct{ key, msg string }

// hasCredentials reports whether the server URL (or any URL of a
// comma-separated list) carries user information.
func hasCredentials(servers string) bool {
	for _, s := range strings.Split(servers, ",") {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		if u, err := url.Parse(s); err == nil && u.User != nil {
			return true
		}
		// an unparsable URL with an @ before its host still holds one
		if _, rest, ok := strings.Cut(s, "://"); ok && strings.Contains(strings.SplitN(rest, "/", 2)[0], "@") {
			return true
		}
	}
	return false
}

// check returns every problem of c, each naming its TOML key. It does no
// I/O (files are read when the output is built).
func (c *Config) check() []problem {
	var ps []problem
	bad := func(key, format string, args ...any) { ps = append(ps, problem{key, fmt.Sprintf(format, args...)}) }
	if len(c.Servers) == 0 {
		bad("servers", "at least one server URL is needed")
	}
	for _, s := range c.Servers {
		if strings.TrimSpace(s) == "" {
			bad("servers", "empty server URL")
		} else if hasCredentials(s) {
			// a URL is printed by connection errors and logs; a secret
			// in it would be too
			bad("servers", "credentials in a server URL: use username/password, token, nkey_seed_file or credentials_file (with ${ENV})")
		}
	}
	switch c.Encoding {
	case EncodingJSON, EncodingInflux, EncodingProtobuf:
	default:
		bad("encoding", "unknown encoding %q (want one of: %s)", c.Encoding, strings.Join(Encodings, ", "))
	}
	for _, t := range []struct {
		key, v  string
		allowed []string
	}{{"subject", c.Subject, sampleHolders}, {"event_subject", c.EventSubject, eventHolders}, {"self_subject", c.SelfSubject, selfHolders}} {
		if _, err := parseTemplate(t.v, t.allowed); err != nil {
			bad(t.key, "%v", err)
		}
	}
	if c.GPU != "uuid" && c.GPU != "index" {
		bad("gpu", "unknown value %q (want uuid or index)", c.GPU)
	}
	if c.MaxMessageBytes < 0 || (c.MaxMessageBytes > 0 && c.MaxMessageBytes < 1024) {
		bad("max_message_bytes", "%d: want 0 (the server's max_payload) or at least 1024", c.MaxMessageBytes)
	}
	if c.IdentityInterval != 0 && (c.IdentityInterval < MinIdentityInterval || c.IdentityInterval > MaxIdentityInterval) {
		bad("identity_interval", "%v: want between %v and %v", c.IdentityInterval, MinIdentityInterval, MaxIdentityInterval)
	}
	if (c.Username == "") != (c.Password == "") {
		bad("username", "username and password go together")
	}
	auths := 0
	for _, v := range []string{c.Username, c.Token, c.NKeySeedFile, c.CredentialsFile} {
		if v != "" {
			auths++
		}
	}
	if auths > 1 {
		bad("token", "set one of username/password, token, nkey_seed_file, credentials_file")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls_cert", "tls_cert and tls_key go together")
	}
	if c.JetStream {
		if c.Stream == "" {
			bad("stream", "empty stream name")
		}
		if strings.ContainsAny(c.Stream, ".*> \t") {
			bad("stream", "%q: a stream name has no dots, wildcards or whitespace", c.Stream)
		}
		if c.StreamStorage != "file" && c.StreamStorage != "memory" {
			bad("stream_storage", "unknown value %q (want file or memory)", c.StreamStorage)
		}
		if c.MaxPending < 1 {
			bad("max_pending", "must be positive")
		}
	}
	return ps
}

// Validate checks c without any I/O; every problem names its key.
func (c Config) Validate() error {
	var errs []error
	for _, p := range c.check() {
		errs = append(errs, fmt.Errorf("nats: %s: %s", p.key, p.msg))
	}
	return errors.Join(errs...)
}

// jetStreamKeys are only meaningful with jetstream = true.
var jetStreamKeys = []string{"stream", "create_stream", "stream_subjects", "stream_storage", "stream_max_age",
	"stream_max_bytes", "stream_replicas", "duplicate_window", "max_pending", "ack_timeout"}

// Parse decodes a [[outputs.nats]] block (outputs.Kind.Parse).
func Parse(t *config.Table) Config {
	c := DefaultConfig()
	if t.Has("servers") {
		t.Strings("servers", &c.Servers)
	}
	t.OneOf("encoding", &c.Encoding, Encodings...)
	t.String("subject", &c.Subject)
	t.String("event_subject", &c.EventSubject)
	t.String("self_subject", &c.SelfSubject)
	t.OneOf("gpu", &c.GPU, "uuid", "index")
	t.Int("max_message_bytes", &c.MaxMessageBytes, 0, 1<<30)
	t.Duration("connect_timeout", &c.ConnectTimeout)
	t.Duration("reconnect_wait", &c.ReconnectWait)
	t.Int("reconnect_buffer_bytes", &c.ReconnectBufferBytes, -1, 1<<40)
	t.Bool("retry_on_failed_connect", &c.RetryOnFailedConnect)
	t.Duration("identity_interval", &c.IdentityInterval)
	t.String("username", &c.Username)
	t.String("password", &c.Password)
	t.String("token", &c.Token)
	t.String("nkey_seed_file", &c.NKeySeedFile)
	t.String("credentials_file", &c.CredentialsFile)
	t.String("tls_ca", &c.TLSCA)
	t.String("tls_cert", &c.TLSCert)
	t.String("tls_key", &c.TLSKey)
	t.String("tls_server_name", &c.TLSServerName)
	t.Bool("insecure_skip_verify", &c.InsecureSkipVerify)
	t.Bool("jetstream", &c.JetStream)
	t.String("stream", &c.Stream)
	t.Bool("create_stream", &c.CreateStream)
	t.Strings("stream_subjects", &c.StreamSubjects)
	t.OneOf("stream_storage", &c.StreamStorage, "file", "memory")
	t.Duration("stream_max_age", &c.StreamMaxAge)
	maxBytes := int(c.StreamMaxBytes)
	t.Int("stream_max_bytes", &maxBytes, 0, 1<<60)
	c.StreamMaxBytes = int64(maxBytes)
	t.Int("stream_replicas", &c.StreamReplicas, 1, 5)
	t.Duration("duplicate_window", &c.DuplicateWindow)
	t.Int("max_pending", &c.MaxPending, 1, 1<<20)
	t.Duration("ack_timeout", &c.AckTimeout)
	if !c.JetStream {
		for _, k := range jetStreamKeys {
			if t.Has(k) {
				t.Errorf(k, "set, but jetstream is false: set jetstream = true")
			}
		}
	}
	for _, p := range c.check() {
		if t.Has(p.key) || p.key == "subject" || p.key == "event_subject" || p.key == "self_subject" {
			t.Errorf(p.key, "%s", p.msg)
		} else {
			t.Errorf("", "%s: %s", p.key, p.msg)
		}
	}
	return c
}

// Kind describes the NATS output to the config registry.
func Kind() outputs.Kind {
	return outputs.Typed(outputs.TypedKind[Config]{
		Kind:         "nats",
		SinkKeys:     []string{"servers", "subject", "event_subject", "self_subject", "gpu", "jetstream", "stream"},
		OutOfProcess: true, // a network output: its own process (plugins.HostRegistry)
		SampleConfig: SampleConfig,
		Parse:        Parse,
		Timeouts: func(o *outputs.Block, c Config) outputs.KindTimeouts {
			return outputs.RequestTimeout(o, "ack_timeout", c.AckTimeout)
		},
		Build: func(o *outputs.Block, c Config, env outputs.BuildEnv) (record.Output, error) {
			// The agent names the file, line and output: no prefix of our own.
			out, err := newOutput(c, newOptions([]Option{WithName(o.Name), WithHost(env.Host),
				WithGlobalTags(env.GlobalTags), WithLogger(env.Logger), WithCatalog(env.Catalog)}))
			if err != nil {
				return nil, err
			}
			return out, nil
		},
		Check: func(o *outputs.Block, _ Config) (_, warnings config.Errors) {
			return nil, outputs.DefaultWarning(o, DefaultServer, "servers")
		},
	})
}
