package rpc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordpb"
)

// ConfigureInput is what the host hands a plugin's Configure.
type ConfigureInput struct {
	Name, Kind string
	Config     map[string]any
	Host       string
	GlobalTags map[string]string
	Catalog    *catalog.Catalog
}

// KeyError is one problem a plugin found with a key of its block.
type KeyError struct {
	// Key is relative to the block handed to Configure.
	Key, Msg string
}

// ConfigError is returned by Configure when the plugin refused keys.
type ConfigError struct{ Errors []KeyError }

func (e *ConfigError) Error() string {
	var s string
	for i, k := range e.Errors {
		if i > 0 {
			s += "; "
		}
		if k.Key != "" {
			s += k.Key + ": "
		}
		s += k.Msg
	}
	return "config refused: " + s
}

// Client is the host side of one plugin connection. It implements
// record.Output's Write (one goroutine at a time, as the pump calls it);
// Health may be called concurrently.
//
// Device identities: the client remembers the newest identity of every
// device it was handed and sends each one on the connection's first batch
// and again whenever it changes — a new Generation, or another identity
// under the same index with the same Generation (a buffer replaying an
// earlier gpusampler process's batches, then this one's) — so a restarted
// plugin (a new Client seeded with Devices of the old one) learns every
// device again and a sink never labels one device's data with another's.
type Client struct {
	c   proto.OutputClient
	req proto.WriteRequest
	// devMu guards devices: the supervisor reads them (Devices) while the
	// pump's Write may be updating them.
	devMu   sync.Mutex
	devices map[int]record.Device
	sent    map[int]record.Device // device index → identity sent on this connection
	pending []record.Device
}

// NewClient returns a client over c that knows devices already.
func NewClient(c proto.OutputClient, devices []record.Device) *Client {
	cl := &Client{c: c, devices: map[int]record.Device{}, sent: map[int]record.Device{}}
	for _, d := range devices {
		cl.devices[d.Index] = d
	}
	return cl
}

// Devices returns every identity the client knows, by index.
func (c *Client) Devices() []record.Device {
	c.devMu.Lock()
	out := slices.Collect(maps.Values(c.devices))
	c.devMu.Unlock()
	slices.SortFunc(out, func(a, b record.Device) int { return a.Index - b.Index })
	return out
}

// Configure sends the config block. Key problems come back as a
// *ConfigError.
func (c *Client) Configure(ctx context.Context, in ConfigureInput) error {
	t, err := EncodeTable(in.Config)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	resp, err := c.c.Configure(ctx, &proto.ConfigureRequest{ProtocolVersion: proto.ProtocolVersion_PROTOCOL_VERSION_1,
		Name: in.Name, Kind: in.Kind, Config: t, Host: in.Host, GlobalTags: in.GlobalTags, Metrics: catalogToProto(in.Catalog)})
	if err != nil {
		return fmt.Errorf("configure: %w", statusError(err))
	}
	if len(resp.GetErrors()) > 0 {
		ce := &ConfigError{}
		for _, e := range resp.GetErrors() {
			ce.Errors = append(ce.Errors, KeyError{Key: e.GetKey(), Msg: e.GetMessage()})
		}
		return ce
	}
	return nil
}

// Write sends b. Its error has the kind the plugin's output returned
// (record.Classify); a broken connection or a call that timed out is
// unavailable.
func (c *Client) Write(ctx context.Context, b *record.Batch) error {
	c.devMu.Lock()
	// Batches come in order: the last identity of an index is the newest
	// (Generations of different gpusampler processes do not compare).
	for _, d := range b.Devices {
		c.devices[d.Index] = d
	}
	c.pending = c.pending[:0]
	for _, i := range slices.Sorted(maps.Keys(c.devices)) {
		if d := c.devices[i]; c.sent[i] != d {
			c.pending = append(c.pending, d)
		}
	}
	c.devMu.Unlock()
	encodeBatch(&c.req, b, c.pending)
	_, err := c.c.Write(ctx, &c.req)
	if err != nil {
		return fmt.Errorf("write: %w", statusError(err))
	}
	for _, d := range c.pending {
		c.sent[d.Index] = d
	}
	return nil
}

// Health asks the plugin whether it is alive and can deliver. A plugin that
// answers "not ok" returns ErrNotHealthy; one that does not answer returns
// the transport's error.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.HealthStats(ctx)
	return err
}

// HealthStats is Health that also returns the counters the plugin's output
// reported with its answer (record.StatsReporter on the plugin side; nil
// when it reports none). Stats come with an ErrNotHealthy answer too.
func (c *Client) HealthStats(ctx context.Context) ([]record.Field, error) {
	resp, err := c.c.Health(ctx, &proto.HealthRequest{})
	if err != nil {
		return nil, err
	}
	stats := recordpb.ToFields(resp.GetStats())
	if !resp.GetOk() {
		return stats, fmt.Errorf("%w: %s", ErrNotHealthy, resp.GetMessage())
	}
	return stats, nil
}

// ErrNotHealthy is returned by Health when the plugin answered that it
// cannot deliver.
var ErrNotHealthy = errors.New("plugin reports unhealthy")

// Close asks the plugin to flush and close its output.
func (c *Client) Close(ctx context.Context) error {
	if _, err := c.c.Close(ctx, &proto.CloseRequest{}); err != nil {
		return fmt.Errorf("close: %w", statusError(err))
	}
	return nil
}

// statusError turns a gRPC status into an error of the kind the plugin's
// output returned (record.Classify sees it; the plugin's message is
// kept). The kind comes from the status's errdetails.ErrorInfo (domain
// ErrorDomain). A status without one — the call never reached the
// plugin's output, or an older plugin — is classified by its code:
// Unavailable, DeadlineExceeded, Canceled, Aborted and ResourceExhausted
// are unavailable, InvalidArgument is permanent, the rest retryable.
func statusError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	re := &remoteError{msg: st.Message(), code: st.Code()}
	kind, found := detailKind(st)
	if !found {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.ResourceExhausted:
			kind = record.KindUnavailable
			re.transport = st.Code() != codes.ResourceExhausted
		case codes.InvalidArgument:
			kind = record.KindPermanent
		default:
			kind = record.KindRetryable
		}
	}
	if kind == record.KindNone { // a detail that contradicts the error itself
		kind = record.KindRetryable
	}
	return record.WithKind(record.RetryAfter(re, detailRetryAfter(st)), kind)
}

// detailKind returns the kind an ErrorInfo detail of st names.
func detailKind(st *status.Status) (record.ErrorKind, bool) {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			if k, ok := record.ParseErrorKind(info.GetReason()); ok {
				return k, true
			}
		}
	}
	return 0, false
}

// detailRetryAfter returns the delay of a RetryInfo detail of st (the
// output's retry hint), 0 when none.
func detailRetryAfter(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// IsTransport reports whether err says the call may not have reached a
// working plugin (connection broken, timeout): the supervisor then checks
// the plugin at once.
func IsTransport(err error) bool {
	var r *remoteError
	return errors.As(err, &r) && r.transport
}

// remoteError is an error status from the plugin, or from the transport
// (transport: no answer from the plugin's output).
type remoteError struct {
	msg       string
	code      codes.Code
	transport bool
}

func (e *remoteError) Error() string {
	if e.transport {
		return fmt.Sprintf("%s (%s)", e.msg, e.code)
	}
	return e.msg
}
