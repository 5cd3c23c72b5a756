package influxdb

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// Write APIs.
const (
	// APIv1 is InfluxDB 1.x's POST /write?db=&rp=&precision=ns, also served
	// by InfluxDB 2.x and 3.x (compatibility) and by Telegraf's
	// influxdb_listener. Auth: user/password (HTTP basic).
	APIv1 = "v1"
	// APIv2 is POST /api/v2/write?org=&bucket=&precision=ns (InfluxDB 2.x,
	// 3.x, Telegraf's influxdb_v2_listener). Auth: "Token TOKEN".
	APIv2 = "v2"
	// APIv3 is POST /api/v3/write_lp?db=&precision=nanosecond (InfluxDB 3
	// Core/Enterprise). Auth: "Bearer TOKEN".
	APIv3 = "v3"
)

// APIs lists the supported write APIs.
var APIs = []string{APIv1, APIv2, APIv3}

// Defaults.
const (
	DefaultTimeout         = 5 * time.Second
	DefaultMaxPayloadBytes = 4 << 20
)

// WriterOptions configure a Writer. Only URL and the API's target (database
// or bucket) are required.
type WriterOptions struct {
	// Kind and Name identify the output in errors and logs ("influxdb",
	// "telegraf"; the block's name).
	Kind, Name string
	// URL is the server's base URL ("http://127.0.0.1:8086"); a path in it
	// is a prefix (a reverse proxy's).
	URL string
	// API is APIv1 (default), APIv2 or APIv3.
	API string
	// Database (v1, v3) and RetentionPolicy (v1).
	Database, RetentionPolicy string
	// Username and Password: v1 HTTP basic auth.
	Username, Password string
	// Organization and Bucket: v2.
	Organization, Bucket string
	// Token: v2 ("Authorization: Token ...") and v3 ("Bearer ...").
	Token string
	// Gzip compresses request bodies (Content-Encoding: gzip).
	Gzip bool
	// Timeout bounds one HTTP request (default 5s); the Write's context
	// bounds it too, whichever ends first.
	Timeout time.Duration
	// MaxPayloadBytes splits a larger body at line boundaries into several
	// requests (default 4 MiB, before compression).
	MaxPayloadBytes int
	// CreateDatabase (v1) makes a write that finds the database missing
	// (404) ask the server to create it (CREATE DATABASE), as Telegraf's
	// influxdb output does unless skip_database_creation is set.
	CreateDatabase bool
	// TLS is the client TLS configuration (nil: Go's defaults).
	TLS *tls.Config
	// Logger gets rare notes (partial writes); nil discards.
	Logger *slog.Logger
	// Transport replaces the HTTP transport (tests).
	Transport http.RoundTripper
}

// WriterStats are a Writer's counters.
type WriterStats struct {
	// Requests counts HTTP requests made; Retries those made after a
	// failed one (a batch offered again by the pump or buffer).
	Requests, Retries uint64
	// BytesSent counts request body bytes as sent (after compression).
	BytesSent uint64
	// PartialWrites counts bodies the server answered with 400 (it stored
	// the valid lines and rejected the others); RejectedPoints sums the
	// "dropped=N" counts the server reported with them.
	PartialWrites, RejectedPoints uint64
}

// Writer posts line protocol to one InfluxDB-compatible endpoint: one
// request per part of a Write, the error classified for the caller, which
// owns retrying (record.Classify). Its methods may be called from one goroutine at a
// time (the output's pump or buffer); Stats from any.
type Writer struct {
	opts     WriterOptions
	endpoint string // full write URL with query
	auth     string // Authorization header value, "" for none
	client   *http.Client
	log      *slog.Logger
	gz       outputs.Gzipper

	requests, retries, bytesSent, partial, rejected atomic.Uint64
	failedLast                                      atomic.Bool   // the last request failed, not permanently
	created                                         atomic.Uint64 // databases created

	createMu   sync.Mutex
	lastCreate time.Time
}

// NewWriter validates opts and returns a writer. It does no network I/O.
func NewWriter(opts WriterOptions) (*Writer, error) {
	if opts.Kind == "" {
		opts.Kind = "influxdb"
	}
	if opts.Name == "" {
		opts.Name = opts.Kind
	}
	if opts.API == "" {
		opts.API = APIv1
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxPayloadBytes <= 0 {
		opts.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Writer{opts: opts, log: opts.Logger}
	endpoint, auth, err := writeEndpoint(opts)
	if err != nil {
		return nil, w.errorf("%w", err)
	}
	w.endpoint, w.auth = endpoint, auth
	tr := opts.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = opts.TLS
		t.MaxIdleConnsPerHost = 4
		tr = t
	}
	w.client = &http.Client{Transport: tr, Timeout: opts.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return w, nil
}

// writeEndpoint builds the write URL and the Authorization header of opts.
func writeEndpoint(opts WriterOptions) (endpoint, auth string, err error) {
	u, err := url.Parse(opts.URL)
	if err != nil {
		return "", "", fmt.Errorf("url %q: %v", opts.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", "", fmt.Errorf("url %q: want http://HOST:PORT or https://HOST:PORT", opts.URL)
	}
	if u.User != nil {
		return "", "", fmt.Errorf("url %q: put credentials in username/password or token, not in the URL", u.Redacted())
	}
	q := url.Values{}
	base := strings.TrimRight(u.Path, "/")
	switch opts.API {
	case APIv1:
		u.Path = base + "/write"
		q.Set("db", opts.Database)
		if opts.RetentionPolicy != "" {
			q.Set("rp", opts.RetentionPolicy)
		}
		q.Set("precision", "ns")
		if opts.Username != "" || opts.Password != "" {
			auth = "Basic " + basicAuth(opts.Username, opts.Password)
		}
	case APIv2:
		u.Path = base + "/api/v2/write"
		if opts.Organization != "" {
			q.Set("org", opts.Organization)
		}
		q.Set("bucket", opts.Bucket)
		q.Set("precision", "ns")
		if opts.Token != "" {
			auth = "Token " + opts.Token
		}
	case APIv3:
		u.Path = base + "/api/v3/write_lp"
		q.Set("db", opts.Database)
		q.Set("precision", "nanosecond")
		if opts.Token != "" {
			auth = "Bearer " + opts.Token
		}
	default:
		return "", "", fmt.Errorf("api %q: want one of %s", opts.API, strings.Join(APIs, ", "))
	}
	u.RawQuery = q.Encode()
	return u.String(), auth, nil
}

// Endpoint returns the write URL (it never holds credentials).
func (w *Writer) Endpoint() string { return w.endpoint }

// Stats returns the counters (any goroutine).
func (w *Writer) Stats() WriterStats {
	return WriterStats{Requests: w.requests.Load(), Retries: w.retries.Load(), BytesSent: w.bytesSent.Load(),
		PartialWrites: w.partial.Load(), RejectedPoints: w.rejected.Load()}
}

// CloseIdle closes idle connections.
func (w *Writer) CloseIdle() { w.client.CloseIdleConnections() }

// Write posts body (newline-terminated lines of line protocol), split at
// line boundaries into requests of at most MaxPayloadBytes. Each request is
// made once, bounded by Timeout and ctx's deadline: the first that fails
// ends the Write with its error, by its record.ErrorKind, and the caller
// decides whether to offer the batch again: unavailable when no server
// answered (connection refused, DNS) or it answered 429, 502, 503 or 504 —
// the sink is down or overloaded, the same batch should wait for it;
// retryable for any other 5xx and for a request that timed out; a
// Retry-After the server sent marks the error (record.RetryAfterOf), so that
// the retrier waits at least that long. A 4xx other than 429 is marked
// record.Permanent: resending the same lines cannot
// succeed (400 is a partial write — the server stored the valid lines).
// Parts already accepted are not resent within this Write; a caller that
// offers the whole body again resends them, which InfluxDB treats as an
// idempotent overwrite (same series and timestamp).
//
// Write does not retain body.
func (w *Writer) Write(ctx context.Context, body []byte) error {
	for len(body) > 0 {
		part := body
		if len(part) > w.opts.MaxPayloadBytes {
			cut := bytes.LastIndexByte(part[:w.opts.MaxPayloadBytes], '\n')
			if cut < 0 { // one line longer than the limit: send it whole
				cut = bytes.IndexByte(part, '\n')
				if cut < 0 {
					cut = len(part) - 1
				}
			}
			part = part[:cut+1]
		}
		if err := w.post(ctx, part); err != nil {
			return err
		}
		body = body[len(part):]
	}
	return nil
}

// post sends one request body: one attempt, bounded by Timeout and by
// ctx's deadline. Retrying is the caller's (the pump's or the buffer's).
func (w *Writer) post(ctx context.Context, body []byte) error {
	payload := body
	if w.opts.Gzip {
		payload = w.gz.Compress(body)
	}
	if w.failedLast.Load() {
		w.retries.Add(1)
	}
	after, err := w.attempt(ctx, payload)
	if err != nil && w.opts.Gzip {
		w.gz.Release() // the failed request's transport may still read payload
	}
	err = record.RetryAfter(err, after) // the server's Retry-After, for whoever retries
	w.failedLast.Store(err != nil && !record.IsPermanent(err))
	return err
}

// attempt makes one request. It returns the server's Retry-After (0 when
// none) with a retryable error.
func (w *Writer) attempt(ctx context.Context, payload []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.endpoint, bytes.NewReader(payload))
	if err != nil {
		return 0, record.Permanent(w.errorf("%w", err))
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	req.Header.Set("User-Agent", "gpusampler")
	if w.opts.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	if w.auth != "" {
		req.Header.Set("Authorization", w.auth)
	}
	w.requests.Add(1)
	w.bytesSent.Add(uint64(len(payload)))
	resp, err := w.client.Do(req)
	if err != nil {
		err = w.errorf("POST %s: %w", w.redacted(), unwrapURLError(err))
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return 0, err // no answer in time: this attempt failed (retryable)
		}
		return 0, record.Unavailable(err) // no server to talk to: the sink is down
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return 0, nil
	}
	werr := &WriteError{Kind: w.opts.Kind, Name: w.opts.Name, API: w.opts.API, URL: w.redacted(),
		StatusCode: resp.StatusCode, Message: serverMessage(resp, msg)}
	werr.Hint = w.hint(werr)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		// Overloaded, or a proxy in front of a server that is down.
		return retryAfter(resp.Header.Get("Retry-After")), record.Unavailable(werr)
	case http.StatusUnauthorized, http.StatusForbidden:
		// Not ready: credentials not (yet) valid. The lines are fine; a
		// buffer holds them as in an outage.
		return 0, record.Unavailable(werr)
	case http.StatusNotFound:
		if !notAnEndpoint(werr.Message) {
			// Not ready: the database or bucket does not exist (yet).
			w.maybeCreateDatabase(ctx)
			return 0, record.Unavailable(werr)
		}
	}
	switch {
	case resp.StatusCode >= 500:
		return retryAfter(resp.Header.Get("Retry-After")), werr
	case resp.StatusCode == http.StatusBadRequest:
		w.partial.Add(1)
		n := droppedCount(werr.Message)
		w.rejected.Add(n)
		w.log.Warn("server rejected lines (partial write: the valid lines were stored)",
			"status", resp.StatusCode, "dropped", n, "err", werr.Message)
		return 0, record.Permanent(werr)
	}
	return 0, record.Permanent(werr)
}

// notAnEndpoint reports whether a 404's message says the server has no such
// endpoint (a wrong url or api), rather than no such database or bucket.
func notAnEndpoint(msg string) bool { return strings.Contains(strings.ToLower(msg), "page not found") }

// createEvery bounds how often a writer asks the server to create its
// database.
const createEvery = 10 * time.Second

// maybeCreateDatabase sends CREATE DATABASE for a v1 writer with
// CreateDatabase set (Telegraf's skip_database_creation = false), at most
// once per createEvery: the write that found it missing still fails, and
// the next one (the buffer's or pump's retry) finds it. Its outcome is
// logged, never returned.
func (w *Writer) maybeCreateDatabase(ctx context.Context) {
	if !w.opts.CreateDatabase || w.opts.API != APIv1 {
		return
	}
	w.createMu.Lock()
	if time.Since(w.lastCreate) < createEvery && !w.lastCreate.IsZero() {
		w.createMu.Unlock()
		return
	}
	w.lastCreate = time.Now()
	w.createMu.Unlock()
	u, err := url.Parse(w.opts.URL)
	if err != nil {
		return
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/query"
	form := url.Values{"q": {fmt.Sprintf("CREATE DATABASE %q", w.opts.Database)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "gpusampler")
	if w.auth != "" {
		req.Header.Set("Authorization", w.auth)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		w.log.Warn("database missing; creating it failed", "database", w.opts.Database, "err", unwrapURLError(err))
		return
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 || bytes.Contains(msg, []byte(`"error"`)) {
		w.log.Warn("database missing; creating it failed", "database", w.opts.Database, "status", resp.StatusCode,
			"err", string(bytes.TrimSpace(msg)))
		return
	}
	w.created.Add(1)
	w.log.Warn("database missing; created it (skip_database_creation = true turns this off)", "database", w.opts.Database)
}

// redacted returns the endpoint for messages (it holds no secrets, but a
// user-supplied URL path might; keep it as configured).
func (w *Writer) redacted() string { return w.endpoint }

func (w *Writer) errorf(format string, args ...any) error {
	return fmt.Errorf("%s %q: "+format, append([]any{w.opts.Kind, w.opts.Name}, args...)...)
}

// hint explains the common rejections in the user's terms.
func (w *Writer) hint(e *WriteError) string {
	target := func() string {
		switch w.opts.API {
		case APIv2:
			return fmt.Sprintf("bucket %q (org %q)", w.opts.Bucket, w.opts.Organization)
		default:
			return fmt.Sprintf("database %q", w.opts.Database)
		}
	}
	pageNotFound := strings.Contains(strings.ToLower(e.Message), "page not found")
	switch e.StatusCode {
	case http.StatusBadRequest:
		if strings.Contains(e.Message, "field type conflict") {
			return "partial write: a field's type differs from what the database holds (the valid lines were stored)"
		}
		return "partial write: the server stored the valid lines and rejected these (not retried)"
	case http.StatusUnauthorized:
		if w.opts.API == APIv1 {
			return "authentication failed: check username and password"
		}
		return "authentication failed: wrong or missing token"
	case http.StatusForbidden:
		return "forbidden: the credentials may not write to " + target()
	case http.StatusNotFound:
		if pageNotFound {
			return fmt.Sprintf("the server has no %s write endpoint: check url and api (InfluxDB 1.x speaks only v1)", w.opts.API)
		}
		return target() + " does not exist: the lines are kept (with a buffer) until it does; create it, or fix the output's settings"
	case http.StatusRequestEntityTooLarge:
		return "request too large: lower max_payload_bytes or max_batch"
	case http.StatusTooManyRequests:
		return "rate limited: retrying"
	}
	return ""
}

// WriteError is a write the server answered with a non-2xx status.
type WriteError struct {
	// Kind and Name identify the output.
	Kind, Name string
	// API and URL are the write API and endpoint.
	API, URL string
	// StatusCode is the HTTP status.
	StatusCode int
	// Message is the server's error text (its JSON "error"/"message", or
	// the body).
	Message string
	// Hint says what to do about it, when known.
	Hint string
}

func (e *WriteError) Error() string {
	s := fmt.Sprintf("%s %q: POST %s: %d %s", e.Kind, e.Name, e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// serverMessage extracts the error text of a response: InfluxDB 1.x sends
// {"error": ...} (and X-Influxdb-Error), 2.x {"code":..., "message": ...},
// 3.x {"error": ..., "data": ...}.
func serverMessage(resp *http.Response, body []byte) string {
	var j struct {
		Error   string `json:"error"`
		Message string `json:"message"`
		Code    string `json:"code"`
	}
	if json.Unmarshal(body, &j) == nil {
		if j.Message != "" {
			return j.Message
		}
		if j.Error != "" {
			return j.Error
		}
	}
	if h := resp.Header.Get("X-Influxdb-Error"); h != "" {
		return h
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 512 {
		s = s[:512] + "…"
	}
	return s
}

// droppedCount finds "dropped=N" in an InfluxDB 1.x partial-write message.
func droppedCount(msg string) uint64 {
	i := strings.LastIndex(msg, "dropped=")
	if i < 0 {
		return 0
	}
	s := msg[i+len("dropped="):]
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	n, _ := strconv.ParseUint(s[:j], 10, 64)
	return n
}

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// unwrapURLError drops *url.Error's "POST URL:" prefix (the message names
// the URL already).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
