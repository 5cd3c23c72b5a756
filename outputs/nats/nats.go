// Package nats is the NATS output: it publishes every record to a NATS
// cluster on predictable subjects, so that a fleet of GPU nodes feeds
// stream processors.
//
// Subjects come from templates, by default gpusampler.{host}.{gpu}.{group}
// for samples and summaries (one subject per device and metric group),
// gpusampler.{host}.{gpu}.events for events and gpusampler.{host}.self for
// self-metrics; placeholder values are sanitized into one token each
// (Sanitize). A batch is split per subject, and further so that no message
// exceeds the server's max_payload. Every message carries the headers
// Content-Type (the encoding: JSON Lines, line protocol or protobuf),
// Gpusampler-Schema, Gpusampler-Seq (the batch's Seq) and Gpusampler-Part;
// package stream decodes any of them back into records.
//
// Core NATS publishes fire-and-forget. With retry_on_failed_connect, what
// is written before the first server answers is kept by the output (up to
// reconnect_buffer_bytes; beyond it Write fails with record.ErrUnavailable)
// and published, in order, by the first Write or Close after the
// connection is up.
//
// Device identities: the pump sends a device's identity once and on
// change; the output attaches it again to every subject's messages at
// least every identity_interval and after each reconnect, so that a
// consumer that subscribes late learns every device within that bound.
// With JetStream, Write publishes
// asynchronously (at most max_pending unacknowledged), then waits for every
// ack of the batch: an error is returned (retryable) unless the stream
// stored every message, and a retried batch is published with the same
// Nats-Msg-Id, so the stream drops what it already has within its
// duplicate window. The id is the message's Seq, subject and part and a
// hash of the output's name, the batch's host and the message's records
// (not the identity records it carries, which a new process attaches
// again): it is the same when the output was restarted in a new process
// (a crash, a wedge, a memory restart of the outputs' child) and the host
// offers the batch again, so that the stream keeps one copy then too.
//
// Errors: Write makes one attempt within its context's deadline (a full
// window of unacknowledged publishes waits at most until then, and so do
// the acks) and leaves retrying to the pump or the per-output buffer. It
// marks rejections that cannot succeed on retry (a message over the
// stream's size limit, a bad subject) with record.Permanent; a failure
// while no server is connected with record.ErrUnavailable (the pump holds
// the batch); everything else (ack timeout, no responders while JetStream
// restarts) is retryable.
//
// Concurrency and ownership: one goroutine calls Write and Close (see
// record.Output); Stats may be called from any goroutine. Write does not
// retain the batch.
package nats

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/internal/encoding/protobuf"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

// SampleConfig is this output's fragment of the example configuration.
//
//go:embed sample.conf
var SampleConfig string

// Option configures an Output beyond its Config (what the program, not the
// file, provides).
type Option func(*options)

type options struct {
	name       string
	host       string
	globalTags map[string]string
	log        *slog.Logger
	catalog    *catalog.Catalog
	natsOpts   []natsgo.Option
	now        func() time.Time
}

// WithName names the output in errors, logs and the connection name.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithHost sets the host name ({host}, and the host of every record).
func WithHost(host string) Option { return func(o *options) { o.host = host } }

// WithGlobalTags adds tags to every record ([global_tags]; {tag:NAME}).
func WithGlobalTags(tags map[string]string) Option {
	return func(o *options) { o.globalTags = maps.Clone(tags) }
}

// WithLogger sets the logger (connection changes only; nothing per sample).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithCatalog sets the metric catalog (default catalog.Default()).
func WithCatalog(c *catalog.Catalog) Option { return func(o *options) { o.catalog = c } }

// WithClock sets the clock that times identity re-sends (default
// time.Now).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithNATSOptions appends nats.go connection options (applied last).
func WithNATSOptions(opts ...natsgo.Option) Option {
	return func(o *options) { o.natsOpts = append(o.natsOpts, opts...) }
}

// Stats are the output's counters.
type Stats struct {
	// Messages and Bytes published (payload bytes), Splits: messages that
	// max_payload made necessary beyond one per subject.
	Messages, Bytes, Splits uint64
	// Acked messages (JetStream), Duplicates among them (the stream had the
	// Nats-Msg-Id already), AckErrors (failed or timed out acks).
	Acked, Duplicates, AckErrors uint64
	// Stored messages (JetStream): each message the stream holds, counted
	// once: with its first acknowledgement, or, for a message that an
	// earlier attempt of this process published without an answer, with
	// the retry's duplicate acknowledgement. That is not Acked less
	// Duplicates: a retry's publish of a message that an attempt given up
	// had stored (its ack came after the Write's deadline, or never) is
	// acknowledged as a duplicate, yet had not been counted; and one
	// acknowledged before the attempt failed on another message is
	// acknowledged again. A new process (the outputs' child restarted)
	// counts no duplicate: what its predecessor stored without hearing so
	// is counted by neither.
	Stored uint64
	// Disconnects and Reconnects of the connection.
	Disconnects, Reconnects uint64
	// Held messages are waiting for the first connection
	// (retry_on_failed_connect); HeldDropped counts those that never went
	// out: still held at Close, or refused as permanent once connected.
	Held, HeldDropped uint64
	// Identities counts identity records re-sent (identity_interval and
	// reconnects).
	Identities uint64
}

// Output publishes batches to NATS. See the package documentation.
type Output struct {
	cfg      Config
	o        options
	nc       *natsgo.Conn
	js       jetstream.JetStream
	subj     template
	evSubj   template
	selfSubj template
	enc      encoder

	devs map[int]record.Device
	// origin is the identity of the batch being written when it is not
	// the output's own (a copy of its Origin; nil: WithHost and
	// WithGlobalTags apply): subjects name its host and tags.
	origin   *record.Origin
	subjects map[subjKey]string
	byKey    map[string]*entry // subject → entry, reset per Write
	// slots caches, per Write, the entry of each (device, metric) of the
	// samples: index device*catalog length+metric, valid while its gen is
	// the Write's. One slice index per sample instead of two map lookups
	// (a struct key with a string, then the subject).
	slots   []slot
	gen     uint32
	order   []*entry
	pool    []*entry
	msgs    []*natsgo.Msg
	futures []jetstream.PubAckFuture
	// attempted holds the Nats-Msg-Ids that earlier, failed attempts at
	// the batch whose Seq is attemptedSeq published: true once one was
	// acknowledged to this output, false while not. A retry's duplicate
	// ack of an id published but not acknowledged is the first news that
	// the stream stored it (counted stored); of an acknowledged one, not.
	attempted    map[string]bool
	attemptedSeq uint64
	// arena holds the payloads of one Write's messages back to back.
	// free: the previous Write's messages, reused with their header maps
	// by the next one; only without JetStream, whose publishes keep their
	// message until acknowledged (that path gets a new arena each Write
	// and new messages). seqText: the current Write's Seq as text.
	arena []byte
	free  []*natsgo.Msg
	// hashes are the message-id hashes of msgs (JetStream only), made by
	// hasher over idScratch.
	hashes    []uint64
	hasher    hash.Hash64
	idScratch []byte
	seqText   string
	closed    bool

	// held: messages written before the first connection, in order.
	held      []*natsgo.Msg
	heldBytes int
	// identSent: when each subject last carried its device's identity;
	// identDue: subjects of the current Write whose identity goes out with
	// it (committed to identSent when the Write succeeds).
	identSent map[string]time.Time
	identDue  []string
	identNew  uint64 // identity records attached by the current Write
	// identGen is the reconnect count when every subject last carried its
	// identity: after a reconnect the next Write re-sends them all (a
	// consumer may have joined meanwhile). identGenDue: the count the
	// current Write saw.
	identGen, identGenDue uint64
	heldGauge             atomic.Int64
	heldDropped           atomic.Uint64
	identities            atomic.Uint64

	messages, bytes, splits, acked, dups, stored, ackErrors, disconnects, reconnects atomic.Uint64
	// closing is set by Close before it closes the connection, so that the
	// disconnect it causes is neither logged nor counted.
	closing atomic.Bool
}

type subjKey struct {
	kind  byte // 's' samples, 'e' events
	dev   int
	group catalog.Group
}

type slot struct {
	gen uint32
	e   *entry
}

// maxSlotDevice bounds the slot cache: samples of higher device indexes
// take the map lookups.
const maxSlotDevice = 256

// entry is one subject's share of a batch.
type entry struct {
	subject string
	dev     int // -1: not one device's (self-metrics)
	b       record.Batch
}

// New connects to the servers of cfg and returns the output. It fails when
// no server can be reached (unless retry_on_failed_connect), when the
// server refuses the credentials, when a file it names cannot be read, or
// when JetStream's stream is missing and create_stream is false. Errors
// start with "nats:" and name the output.
func New(cfg Config, opts ...Option) (*Output, error) {
	o := newOptions(opts)
	out, err := newOutput(cfg, o)
	if err != nil {
		return nil, fmt.Errorf("nats: output %s: %w", o.name, err)
	}
	return out, nil
}

func newOptions(opts []Option) options {
	o := options{name: "nats", log: slog.New(slog.DiscardHandler), now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	if o.catalog == nil {
		o.catalog = catalog.Default()
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o
}

// newOutput is New with errors that do not name the package or the output
// (the config's Build is wrapped by the agent with both).
func newOutput(cfg Config, o options) (*Output, error) {
	fail := func(format string, args ...any) (*Output, error) {
		return nil, fmt.Errorf(format, args...)
	}
	if err := cfg.Validate(); err != nil {
		return fail("%w", err)
	}
	if cfg.IdentityInterval == 0 {
		cfg.IdentityInterval = DefaultIdentityInterval
	}
	out := &Output{cfg: cfg, o: o, devs: map[int]record.Device{},
		subjects: map[subjKey]string{}, byKey: map[string]*entry{}, identSent: map[string]time.Time{}}
	out.subj, _ = parseTemplate(cfg.Subject, sampleHolders)
	out.evSubj, _ = parseTemplate(cfg.EventSubject, eventHolders)
	out.selfSubj, _ = parseTemplate(cfg.SelfSubject, selfHolders)
	for _, t := range [...]template{out.subj, out.evSubj, out.selfSubj} {
		for _, tag := range t.tags() {
			if _, ok := o.globalTags[tag]; !ok {
				return fail("subject %q: {tag:%s}: no such global tag ([global_tags] has: %s)", t.src, tag,
					strings.Join(slices.Sorted(maps.Keys(o.globalTags)), ", "))
			}
		}
	}
	out.enc = newEncoder(cfg.Encoding, &o)

	nopts, err := out.natsOptions()
	if err != nil {
		return fail("%w", err)
	}
	url := strings.Join(cfg.Servers, ",")
	nc, err := natsgo.Connect(url, nopts...)
	if err != nil {
		hint := ""
		if errors.Is(err, natsgo.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization") {
			hint = " (check username/password, token, nkey_seed_file or credentials_file)"
		}
		return fail("connect to %s: %w%s", url, err, hint)
	}
	out.nc = nc
	if cfg.JetStream {
		if err := out.setupJetStream(); err != nil {
			nc.Close()
			return fail("%w", err)
		}
	}
	return out, nil
}

func (out *Output) natsOptions() ([]natsgo.Option, error) {
	c, o := out.cfg, out.o
	opts := []natsgo.Option{
		natsgo.Name("gpusampler " + o.name + "@" + o.host),
		natsgo.Timeout(c.ConnectTimeout),
		natsgo.ReconnectWait(c.ReconnectWait),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectBufSize(c.ReconnectBufferBytes),
		natsgo.RetryOnFailedConnect(c.RetryOnFailedConnect),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if out.closing.Load() {
				return // our own Close: not an outage
			}
			out.disconnects.Add(1)
			o.log.Warn("nats: disconnected; publishes are buffered until reconnected", "err", err)
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			out.reconnects.Add(1) // also makes the next Write re-send every identity
			o.log.Info("nats: reconnected", "server", nc.ConnectedUrlRedacted())
		}),
	}
	switch {
	case c.Username != "":
		opts = append(opts, natsgo.UserInfo(c.Username, c.Password))
	case c.Token != "":
		opts = append(opts, natsgo.Token(c.Token))
	case c.NKeySeedFile != "":
		opt, err := natsgo.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey_seed_file: %w", err)
		}
		opts = append(opts, opt)
	case c.CredentialsFile != "":
		if _, err := os.Stat(c.CredentialsFile); err != nil {
			return nil, fmt.Errorf("credentials_file: %w", err)
		}
		opts = append(opts, natsgo.UserCredentials(c.CredentialsFile))
	}
	tc, err := outputs.TLSClient{CA: c.TLSCA, Cert: c.TLSCert, Key: c.TLSKey, ServerName: c.TLSServerName,
		InsecureSkipVerify: c.InsecureSkipVerify}.Load()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, natsgo.Secure(tc))
	}
	return append(opts, o.natsOpts...), nil
}

func (out *Output) setupJetStream() error {
	c := out.cfg
	js, err := jetstream.New(out.nc, jetstream.WithPublishAsyncMaxPending(c.MaxPending),
		jetstream.WithPublishAsyncTimeout(c.AckTimeout))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	out.js = js
	ctx, cancel := context.WithTimeout(context.Background(), c.ConnectTimeout+c.AckTimeout)
	defer cancel()
	if !c.CreateStream {
		if _, err := js.Stream(ctx, c.Stream); err != nil {
			return fmt.Errorf("jetstream stream %s: %w (create it, or set create_stream = true)", c.Stream, err)
		}
		return nil
	}
	subjects := c.StreamSubjects
	if len(subjects) == 0 {
		for _, t := range [...]template{out.subj, out.evSubj, out.selfSubj} {
			p := t.prefix()
			if p == "" {
				return fmt.Errorf("stream_subjects: subject %q starts with a placeholder: name the stream's subjects", t.src)
			}
			if !strings.HasSuffix(p, ".") {
				p = strings.TrimSuffix(p, ".") // a literal subject
			} else {
				p += ">"
			}
			if !slices.Contains(subjects, p) {
				subjects = append(subjects, p)
			}
		}
	}
	storage := jetstream.FileStorage
	if c.StreamStorage == "memory" {
		storage = jetstream.MemoryStorage
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: c.Stream, Subjects: subjects, Storage: storage,
		MaxAge: c.StreamMaxAge, MaxBytes: cmpOr(c.StreamMaxBytes, -1), Replicas: c.StreamReplicas, Duplicates: c.DuplicateWindow})
	if err != nil {
		return fmt.Errorf("create stream %s (subjects %s): %w", c.Stream, strings.Join(subjects, " "), err)
	}
	return nil
}

func cmpOr(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// Stats returns the output's counters (safe from any goroutine).
func (out *Output) Stats() Stats {
	return Stats{Messages: out.messages.Load(), Bytes: out.bytes.Load(), Splits: out.splits.Load(),
		Acked: out.acked.Load(), Duplicates: out.dups.Load(), Stored: out.stored.Load(), AckErrors: out.ackErrors.Load(),
		Disconnects: out.disconnects.Load(), Reconnects: out.reconnects.Load(),
		Held: uint64(max(out.heldGauge.Load(), 0)), HeldDropped: out.heldDropped.Load(), Identities: out.identities.Load()}
}

// ReportStats implements record.StatsReporter with the counters of Stats.
func (out *Output) ReportStats(dst []record.Field) []record.Field {
	s := out.Stats()
	return append(dst, record.IntField("messages", s.Messages), record.IntField("bytes", s.Bytes),
		record.IntField("splits", s.Splits), record.IntField("acked", s.Acked),
		record.IntField("duplicates", s.Duplicates), record.IntField("stored", s.Stored),
		record.IntField("ack_errors", s.AckErrors),
		record.IntField("disconnects", s.Disconnects), record.IntField("reconnects", s.Reconnects),
		record.GaugeField("held", s.Held), record.IntField("held_dropped", s.HeldDropped),
		record.IntField("identities", s.Identities))
}

// Conn returns the output's connection (for tests and status).
func (out *Output) Conn() *natsgo.Conn { return out.nc }

// Write publishes b, split per subject and by max_payload. With JetStream
// it returns once every message is acknowledged.
func (out *Output) Write(ctx context.Context, b *record.Batch) error {
	if out.closed {
		return record.ErrClosed
	}
	if err := out.publishHeld(); err != nil {
		return err
	}
	msgs, err := out.messagesFor(b)
	if err != nil {
		return err
	}
	if out.js == nil {
		if out.awaitingFirstConnect() {
			err = out.hold(msgs)
		} else {
			err = out.publish(msgs)
		}
	} else if out.awaitingFirstConnect() {
		err = fmt.Errorf("nats: output %s: no server reached yet: %w", out.o.name, record.ErrUnavailable)
	} else {
		err = out.publishJetStream(ctx, b.Seq, msgs)
	}
	if err == nil {
		out.commitIdentities()
	}
	return err
}

func (out *Output) publish(msgs []*natsgo.Msg) error {
	for _, m := range msgs {
		if err := out.nc.PublishMsg(m); err != nil {
			return out.classify(fmt.Errorf("publish %s: %w", m.Subject, err))
		}
		out.count(m)
	}
	return nil
}

// awaitingFirstConnect reports whether the connection has not reached a
// server yet (retry_on_failed_connect). Until then nats.go refuses
// messages with headers (it does not know whether the server takes them).
func (out *Output) awaitingFirstConnect() bool {
	return !out.nc.HeadersSupported() && !out.nc.IsConnected() && !out.nc.IsClosed()
}

// hold keeps msgs until the first connection, up to reconnect_buffer_bytes
// in all; beyond it the batch is refused (retryable) and nothing of it is
// kept.
func (out *Output) hold(msgs []*natsgo.Msg) error {
	limit := out.cfg.ReconnectBufferBytes
	if limit == 0 {
		limit = natsgo.DefaultReconnectBufSize
	}
	size := 0
	for _, m := range msgs {
		size += msgSize(m)
	}
	if limit < 0 || out.heldBytes+size > limit {
		return fmt.Errorf("nats: output %s: no server reached yet and %d bytes already held (reconnect_buffer_bytes %d): %w",
			out.o.name, out.heldBytes, out.cfg.ReconnectBufferBytes, record.ErrUnavailable)
	}
	for _, m := range msgs { // messagesFor reuses its messages and payloads
		h := make(natsgo.Header, len(m.Header))
		for k, vs := range m.Header {
			h[k] = slices.Clone(vs)
		}
		out.held = append(out.held, &natsgo.Msg{Subject: m.Subject, Header: h, Data: slices.Clone(m.Data)})
	}
	out.heldBytes += size
	out.heldGauge.Store(int64(len(out.held)))
	return nil
}

func msgSize(m *natsgo.Msg) int {
	n := len(m.Subject) + len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// publishHeld publishes what was held before the first connection, once
// connected. A message refused as permanent is dropped (counted); any
// other error keeps the rest, in order, for the next try.
func (out *Output) publishHeld() error {
	if len(out.held) == 0 || out.awaitingFirstConnect() {
		return nil
	}
	var err error
	i := 0
	for ; i < len(out.held); i++ {
		m := out.held[i]
		if perr := out.nc.PublishMsg(m); perr != nil {
			if perr = out.classify(fmt.Errorf("publish held %s: %w", m.Subject, perr)); record.IsPermanent(perr) {
				out.heldDropped.Add(1)
				out.o.log.Warn("nats: a message held before the first connection was refused; dropped", "err", perr)
				continue
			}
			err = perr
			break
		}
		out.count(m)
	}
	n := copy(out.held, out.held[i:])
	clear(out.held[n:])
	out.held = out.held[:n]
	out.heldBytes = 0
	for _, m := range out.held {
		out.heldBytes += msgSize(m)
	}
	out.heldGauge.Store(int64(len(out.held)))
	return err
}

func (out *Output) count(m *natsgo.Msg) {
	out.messages.Add(1)
	out.bytes.Add(uint64(len(m.Data)))
}

func (out *Output) publishJetStream(ctx context.Context, seq uint64, msgs []*natsgo.Msg) (err error) {
	futures := out.futures[:0]
	defer func() { clear(futures); out.futures = futures[:0] }()
	if seq != out.attemptedSeq || out.attempted == nil {
		// A new batch: another batch's message ids (they name its Seq)
		// do not come again.
		if out.attempted == nil {
			out.attempted = map[string]bool{}
		}
		clear(out.attempted)
		out.attemptedSeq = seq
	}
	defer func() {
		if err == nil {
			clear(out.attempted) // the batch is done
			return
		}
		for _, f := range futures {
			if id := f.Msg().Header.Get(natsgo.MsgIdHdr); !out.attempted[id] {
				out.attempted[id] = false
			}
		}
	}()
	var firstErr error
	for _, m := range msgs {
		// One attempt within the Write's deadline: a full window of
		// unacknowledged publishes waits at most until then.
		stall := out.cfg.AckTimeout
		if dl, ok := ctx.Deadline(); ok {
			stall = min(stall, time.Until(dl))
		}
		if ctx.Err() != nil || stall <= 0 {
			firstErr = out.unavailable(fmt.Errorf("nats: output %s: publishing: %w", out.o.name, cmp.Or(ctx.Err(), context.DeadlineExceeded)))
			break
		}
		f, err := out.js.PublishMsgAsync(m, jetstream.WithMsgID(m.Header.Get(natsgo.MsgIdHdr)),
			jetstream.WithStallWait(stall))
		if err != nil {
			firstErr = out.unavailable(out.classify(fmt.Errorf("publish %s: %w", m.Subject, err)))
			break
		}
		out.count(m)
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			out.acked.Add(1)
			id := f.Msg().Header.Get(natsgo.MsgIdHdr)
			if acked, earlier := out.attempted[id]; !ack.Duplicate || (earlier && !acked) {
				out.stored.Add(1)
			}
			out.attempted[id] = true
			if ack.Duplicate {
				out.dups.Add(1)
			}
		case err := <-f.Err():
			out.ackErrors.Add(1)
			if firstErr == nil {
				firstErr = out.unavailable(out.classify(fmt.Errorf("ack %s: %w", f.Msg().Subject, err)))
			}
		case <-ctx.Done():
			// The remaining acks resolve (or time out) on their own; the
			// batch is offered again with the same message ids.
			return out.unavailable(fmt.Errorf("nats: output %s: waiting for acks: %w", out.o.name, ctx.Err()))
		}
	}
	return firstErr
}

// unavailable marks err (not permanent) as record.ErrUnavailable while the
// connection has no server: the sink is down, the pump should hold the
// batch rather than spend its offers.
func (out *Output) unavailable(err error) error {
	if err == nil || record.IsPermanent(err) || out.nc.IsConnected() {
		return err
	}
	return record.Unavailable(err)
}

// classify prefixes err with the output's name and marks it permanent when
// retrying cannot help.
func (out *Output) classify(err error) error {
	err = fmt.Errorf("nats: output %s: %w", out.o.name, err)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload), errors.Is(err, natsgo.ErrBadSubject),
		errors.Is(err, natsgo.ErrHeadersNotSupported):
		return record.Permanent(err)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return record.Permanent(err)
	}
	return err
}

// Close waits (briefly) for what is in flight, flushes and closes the
// connection. A second Close does nothing.
func (out *Output) Close() error {
	if out.closed {
		return nil
	}
	out.closed = true
	var err error
	if herr := out.publishHeld(); herr != nil {
		err = herr
	}
	if n := len(out.held); n > 0 {
		out.heldDropped.Add(uint64(n))
		out.heldGauge.Store(0)
		out.o.log.Warn("nats: closing before any server answered; held messages dropped", "messages", n)
		err = errors.Join(err, fmt.Errorf("nats: output %s: close: %d messages held for the first connection were never sent", out.o.name, n))
		clear(out.held)
		out.held = nil
	}
	if out.js != nil && out.js.PublishAsyncPending() > 0 {
		select {
		case <-out.js.PublishAsyncComplete():
		case <-time.After(out.cfg.AckTimeout):
		}
	}
	if out.nc.IsConnected() {
		if ferr := out.nc.FlushTimeout(out.cfg.ConnectTimeout); ferr != nil {
			err = errors.Join(err, fmt.Errorf("nats: output %s: close: flush: %w", out.o.name, ferr))
		}
	}
	out.closing.Store(true)
	out.nc.Close()
	return err
}

// maxData returns the largest payload a message on subject may carry: the
// server's max_payload (or max_message_bytes) less room for the headers.
func (out *Output) maxData(subject string) int {
	limit := int(out.nc.MaxPayload())
	if limit <= 0 {
		limit = 1 << 20
	}
	if c := out.cfg.MaxMessageBytes; c > 0 && c < limit {
		limit = c
	}
	// NATS/1.0 line, four headers with their values, the message id
	// (hash, seq, subject, part).
	return limit - (256 + len(subject))
}

// messagesFor splits b into per-subject messages. The messages and their
// data belong to the output until the next Write.
func (out *Output) messagesFor(b *record.Batch) ([]*natsgo.Msg, error) {
	if !b.Origin.Equal(out.origin) {
		out.origin = nil
		if b.Origin != nil {
			out.origin = &record.Origin{Host: b.Origin.Host, Tags: maps.Clone(b.Origin.Tags)}
		}
		clear(out.subjects)
	}
	for _, d := range b.Devices {
		if old, ok := out.devs[d.Index]; !ok || old.UUID != d.UUID {
			clear(out.subjects)
		}
		out.devs[d.Index] = d
		if lp, ok := out.enc.(*lpEncoder); ok {
			lp.e.SetDevice(d)
		}
	}
	out.resetEntries()
	for _, s := range b.Samples {
		e := out.sampleEntry(s.Device, s.Metric)
		e.b.Samples = append(e.b.Samples, s)
	}
	for _, s := range b.Summaries {
		e := out.sampleEntry(s.Device, s.Metric)
		e.b.Summaries = append(e.b.Summaries, s)
	}
	for _, ev := range b.Events {
		var e *entry
		if ev.Kind == record.EventSelf {
			e = out.entryFor(subjKey{kind: 'm', dev: -1})
		} else {
			e = out.entryFor(subjKey{kind: 'e', dev: ev.Device})
		}
		e.b.Events = append(e.b.Events, ev)
	}
	// Identities travel with every message of their device in this batch,
	// or on the device's events subject when it has none.
	for _, d := range b.Devices {
		found := false
		for _, e := range out.order {
			if e.dev == d.Index {
				e.b.Devices = append(e.b.Devices, d)
				found = true
			}
		}
		if !found {
			e := out.entryFor(subjKey{kind: 'e', dev: d.Index})
			e.b.Devices = append(e.b.Devices, d)
		}
	}
	out.dueIdentities()
	if out.js == nil {
		// Core publishes copy each message into the connection's
		// buffer (hold copies what it keeps): the last Write's messages
		// and payloads are free again.
		out.free = append(out.free, out.msgs...)
		out.arena = out.arena[:0]
	} else {
		out.arena = make([]byte, 0, cap(out.arena))
	}
	clear(out.msgs)
	out.msgs = out.msgs[:0]
	out.hashes = out.hashes[:0]
	out.seqText = strconv.FormatUint(b.Seq, 10)
	for _, e := range out.order {
		e.b.Seq, e.b.Origin = b.Seq, b.Origin
		first := len(out.msgs)
		if err := out.split(e, &e.b); err != nil {
			return nil, err
		}
		n := len(out.msgs) - first
		if n > 1 {
			out.splits.Add(uint64(n - 1))
		}
		for i, m := range out.msgs[first:] {
			part := "1/1"
			if n > 1 {
				part = strconv.Itoa(i+1) + "/" + strconv.Itoa(n)
			}
			setHeader(m.Header, stream.HeaderPart, part)
			if out.js != nil {
				id := strconv.AppendUint(out.idScratch[:0], out.hashes[first+i], 36)
				m.Header.Set(natsgo.MsgIdHdr, string(id)+":"+out.seqText+":"+m.Subject+":"+part)
			}
		}
	}
	return out.msgs, nil
}

// dueIdentities attaches a device's identity to every entry of this batch
// whose subject has not carried it for identity_interval (or since a
// reconnect), and notes the subjects that carry it for commitIdentities.
func (out *Output) dueIdentities() {
	out.identDue, out.identNew = out.identDue[:0], 0
	now := out.o.now()
	out.identGenDue = out.reconnects.Load()
	all := out.identGenDue != out.identGen
	for _, e := range out.order {
		if e.dev < 0 {
			continue
		}
		d, known := out.devs[e.dev]
		if !known {
			continue
		}
		if !slices.ContainsFunc(e.b.Devices, func(x record.Device) bool { return x.Index == e.dev }) {
			last, sent := out.identSent[e.subject]
			if !all && sent && now.Sub(last) < out.cfg.IdentityInterval {
				continue
			}
			e.b.Devices = append(e.b.Devices, d)
			out.identNew++
		}
		out.identDue = append(out.identDue, e.subject)
	}
}

// commitIdentities records that the subjects of a successful Write carried
// their identities.
func (out *Output) commitIdentities() {
	now := out.o.now()
	for _, s := range out.identDue {
		out.identSent[s] = now
	}
	out.identDue = out.identDue[:0]
	out.identGen = out.identGenDue
	out.identities.Add(out.identNew)
	out.identNew = 0
}

// split encodes sub (a share of e) into one message, or several when it is
// too large for the server.
func (out *Output) split(e *entry, sub *record.Batch) error {
	start := len(out.arena)
	out.arena = out.enc.encode(out.arena, sub, out.devs)
	data := out.arena[start:len(out.arena):len(out.arena)]
	if ee, ok := out.enc.(interface{ encodeErr() error }); ok {
		if err := ee.encodeErr(); err != nil {
			// Publishing the rest would count the skipped records as
			// delivered: refuse the batch, so that all are counted.
			return record.Permanent(fmt.Errorf("nats: output %s: subject %s: a line cannot be encoded: %w", out.o.name, e.subject, err))
		}
	}
	limit := out.maxData(e.subject)
	if len(data) <= limit {
		m := out.newMsg()
		m.Subject, m.Data = e.subject, data
		setHeader(m.Header, stream.HeaderContentType, out.enc.contentType())
		setHeader(m.Header, stream.HeaderSchema, schemaText)
		setHeader(m.Header, stream.HeaderSeq, out.seqText)
		out.msgs = append(out.msgs, m)
		if out.js != nil {
			out.hashes = append(out.hashes, out.recordsHash(sub))
		}
		return nil
	}
	out.arena = out.arena[:start]
	n := len(sub.Samples) + len(sub.Summaries) + len(sub.Events)
	if n <= 1 {
		return record.Permanent(fmt.Errorf("nats: output %s: subject %s: one record encodes to %d bytes, more than the %d a message may carry",
			out.o.name, e.subject, len(data), limit))
	}
	// Split into k parts of equal record counts (10% headroom), each split
	// again if still too large. Identities go with the first part.
	k := min(n, (len(data)*11/10)/limit+1)
	for i := range k {
		lo, hi := i*n/k, (i+1)*n/k
		part := record.Batch{Seq: sub.Seq}
		if i == 0 {
			part.Devices = sub.Devices
		}
		part.Samples = window(sub.Samples, lo, hi, 0)
		part.Summaries = window(sub.Summaries, lo, hi, len(sub.Samples))
		part.Events = window(sub.Events, lo, hi, len(sub.Samples)+len(sub.Summaries))
		if err := out.split(e, &part); err != nil {
			return err
		}
	}
	return nil
}

// recordsHash is the hash part of the Nats-Msg-Id of a message carrying
// sub: FNV-1a over the output's name, the batch's host (its Origin's, or
// WithHost) and every field of sub's samples, summaries and events; over
// every field of its identity records only when it carries nothing else.
// A deterministic hash (not maphash, whose seed is per process): a new
// process must find the same id for the same message.
func (out *Output) recordsHash(sub *record.Batch) uint64 {
	b := out.idScratch[:0]
	str := func(v string) { b = binary.AppendUvarint(b, uint64(len(v))); b = append(b, v...) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	f64 := func(v float64) { u64(math.Float64bits(v)) }
	str(out.o.name)
	if out.origin != nil {
		str(out.origin.Host)
	} else {
		str(out.o.host)
	}
	for _, x := range sub.Samples {
		u64(uint64(x.TimeNS))
		f64(x.Value)
		u64(uint64(x.Device)<<32 | uint64(x.Metric)<<16 | uint64(x.Flags))
	}
	for _, x := range sub.Summaries {
		u64(uint64(x.StartNS))
		u64(uint64(x.IntervalNS))
		f64(x.Mean)
		f64(x.Min)
		f64(x.Max)
		f64(x.Last)
		u64(uint64(x.Count)<<32 | uint64(x.Device)<<16 | uint64(x.Metric))
	}
	for _, x := range sub.Events {
		str(string(x.Kind))
		u64(uint64(int64(x.Device)))
		u64(uint64(x.StartNS))
		u64(uint64(x.EndNS))
		str(x.Message)
		for _, a := range x.Attrs {
			str(a.Key)
			str(a.Value)
		}
		for _, f := range x.Fields {
			str(f.Key)
			f64(f.Value)
		}
	}
	if len(sub.Samples)+len(sub.Summaries)+len(sub.Events) == 0 {
		// Every field: a new process numbers its batches from 1 again,
		// and a changed identity (a new pod) at a Seq the old one used
		// must not be taken for the old identity.
		for _, d := range sub.Devices {
			b = fmt.Appendf(b, "%v\x00", d)
		}
	}
	if out.hasher == nil {
		out.hasher = fnv.New64a()
	}
	out.hasher.Reset()
	out.hasher.Write(b)
	out.idScratch = b[:0]
	return out.hasher.Sum64()
}

// schemaText is the Gpusampler-Schema header's value.
var schemaText = strconv.Itoa(stream.SchemaVersion)

// newMsg returns a message of a former Write (its header map keeps the
// keys every message sets) or a new one.
func (out *Output) newMsg() *natsgo.Msg {
	if n := len(out.free); n > 0 {
		m := out.free[n-1]
		out.free[n-1] = nil
		out.free = out.free[:n-1]
		return m
	}
	return &natsgo.Msg{Header: make(natsgo.Header, 4)}
}

// setHeader sets h's key (given in canonical form) to the one value v,
// reusing the value slice.
func setHeader(h natsgo.Header, key, v string) {
	if vs := h[key]; len(vs) == 1 {
		vs[0] = v
		return
	}
	h[key] = []string{v}
}

// window returns the part of s that falls in the record range [lo, hi) when
// s's records are numbered from base.
func window[T any](s []T, lo, hi, base int) []T {
	a, b := max(lo-base, 0), min(hi-base, len(s))
	if a >= b {
		return nil
	}
	return s[a:b]
}

func (out *Output) group(id catalog.MetricID) catalog.Group {
	if m, ok := out.o.catalog.Get(id); ok {
		return m.Group
	}
	return "unknown"
}

// sampleEntry returns the entry of a sample or summary of metric id on
// device dev, through the slot cache.
func (out *Output) sampleEntry(dev uint16, id catalog.MetricID) *entry {
	n := out.o.catalog.Len()
	if int(dev) >= maxSlotDevice || int(id) >= n {
		return out.entryFor(subjKey{'s', int(dev), out.group(id)})
	}
	i := int(dev)*n + int(id)
	if i >= len(out.slots) {
		out.slots = slices.Grow(out.slots, (int(dev)+1)*n-len(out.slots))[:(int(dev)+1)*n]
	}
	if sl := &out.slots[i]; sl.gen == out.gen && sl.e != nil {
		return sl.e
	}
	e := out.entryFor(subjKey{'s', int(dev), out.group(id)})
	out.slots[i] = slot{out.gen, e}
	return e
}

func (out *Output) resetEntries() {
	out.gen++
	if out.gen == 0 { // wrapped: no slot may look current
		clear(out.slots)
		out.gen = 1
	}
	for _, e := range out.order {
		e.b.Reset()
		out.pool = append(out.pool, e)
	}
	out.order = out.order[:0]
	clear(out.byKey)
}

func (out *Output) entryFor(k subjKey) *entry {
	subject, ok := out.subjects[k]
	if !ok {
		subject = out.render(k)
		out.subjects[k] = subject
	}
	if e := out.byKey[subject]; e != nil {
		return e
	}
	var e *entry
	if n := len(out.pool); n > 0 {
		e, out.pool = out.pool[n-1], out.pool[:n-1]
	} else {
		e = &entry{}
	}
	e.subject, e.dev = subject, k.dev
	out.byKey[subject] = e
	out.order = append(out.order, e)
	return e
}

func (out *Output) render(k subjKey) string {
	t := out.subj
	switch k.kind {
	case 'e':
		t = out.evSubj
	case 'm':
		t = out.selfSubj
	}
	d, known := out.devs[k.dev]
	host, tags := out.origin.OriginOr(out.o.host, out.o.globalTags)
	return t.render(func(ph string) string {
		switch ph {
		case PhHost:
			return Sanitize(host)
		case PhGPU:
			if out.cfg.GPU == "uuid" && known && d.UUID != "" {
				return Sanitize(d.UUID)
			}
			if k.dev < 0 {
				return "none"
			}
			return strconv.Itoa(k.dev)
		case PhGPUUUID:
			if known && d.UUID != "" {
				return Sanitize(d.UUID)
			}
			return "unknown"
		case PhGPUIndex:
			if k.dev < 0 {
				return "none"
			}
			return strconv.Itoa(k.dev)
		case PhGroup:
			return Sanitize(string(k.group))
		}
		if tag, ok := strings.CutPrefix(ph, phTag); ok {
			return Sanitize(tags[tag])
		}
		return "_"
	})
}

// encoder turns one subject's share of a batch into a payload.
type encoder interface {
	encode(dst []byte, b *record.Batch, devs map[int]record.Device) []byte
	contentType() string
}

func newEncoder(kind string, o *options) encoder {
	keys := slices.Sorted(maps.Keys(o.globalTags))
	switch kind {
	case EncodingInflux:
		var tags []lineproto.Tag
		for _, k := range keys {
			tags = append(tags, lineproto.Tag{Key: k, Value: o.globalTags[k]})
		}
		return &lpEncoder{e: lineproto.New(lineproto.Options{Host: o.host, GlobalTags: tags, Catalog: o.catalog})}
	case EncodingProtobuf:
		meta := protobuf.Meta{Host: o.host}
		for _, k := range keys {
			meta.Tags = append(meta.Tags, protobuf.Tag{Key: k, Value: o.globalTags[k]})
		}
		return &protobufEncoder{meta: meta}
	}
	return &jsonEncoder{e: jsonl.New(jsonl.Options{Host: o.host, GlobalTags: o.globalTags, Catalog: o.catalog})}
}

type jsonEncoder struct{ e *jsonl.Encoder }

func (j *jsonEncoder) contentType() string { return stream.ContentTypeJSON }
func (j *jsonEncoder) encode(dst []byte, b *record.Batch, devs map[int]record.Device) []byte {
	j.e.Reset()
	j.e.Encode(b)
	return append(dst, j.e.Bytes()...)
}

type lpEncoder struct{ e *lineproto.Encoder }

func (l *lpEncoder) contentType() string { return stream.ContentTypeLineProtocol }
func (l *lpEncoder) encode(dst []byte, b *record.Batch, devs map[int]record.Device) []byte {
	l.e.Reset()
	l.e.Encode(b)
	return append(dst, l.e.Bytes()...)
}

// encodeErr reports a line the last encode skipped (a name or value line
// protocol cannot carry).
func (l *lpEncoder) encodeErr() error { return l.e.Err() }

type protobufEncoder struct {
	enc  protobuf.Encoder
	meta protobuf.Meta
	seen []int
}

func (p *protobufEncoder) contentType() string { return stream.ContentTypeProtobuf }
func (p *protobufEncoder) encode(dst []byte, b *record.Batch, devs map[int]record.Device) []byte {
	// The UUID of every device the message refers to, so that a consumer
	// that missed the identity record still knows the device.
	p.seen = p.seen[:0]
	p.meta.UUIDs = p.meta.UUIDs[:0]
	note := func(i int) {
		if slices.Contains(p.seen, i) {
			return
		}
		p.seen = append(p.seen, i)
		if d, ok := devs[i]; ok && d.UUID != "" {
			p.meta.UUIDs = append(p.meta.UUIDs, protobuf.DeviceRef{Index: i, UUID: d.UUID})
		}
	}
	for _, s := range b.Samples {
		note(int(s.Device))
	}
	for _, s := range b.Summaries {
		note(int(s.Device))
	}
	for _, e := range b.Events {
		if e.Device >= 0 {
			note(e.Device)
		}
	}
	return p.enc.Append(dst, b, &p.meta)
}
