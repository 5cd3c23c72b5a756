package influxdb

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// request is what the test server saw.
type request struct {
	Method, Path, Query, Auth, Encoding string
	Body                                string
}

// recorder is an httptest handler that records requests and answers from
// a script of statuses (the last one repeats).
type recorder struct {
	mu      sync.Mutex
	reqs    []request
	replies []reply
}

type reply struct {
	status  int
	body    string
	headers map[string]string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, _ := io.ReadAll(body)
	r.mu.Lock()
	r.reqs = append(r.reqs, request{req.Method, req.URL.Path, req.URL.RawQuery, req.Header.Get("Authorization"),
		req.Header.Get("Content-Encoding"), string(b)})
	rep := reply{status: http.StatusNoContent}
	if n := len(r.replies); n > 0 {
		rep = r.replies[0]
		if n > 1 {
			r.replies = r.replies[1:]
		}
	}
	r.mu.Unlock()
	for k, v := range rep.headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
}

func (r *recorder) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.reqs...)
}

func newTestWriter(t *testing.T, rec *recorder, opts WriterOptions) *Writer {
	t.Helper()
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	opts.URL = srv.URL
	if opts.Name == "" {
		opts.Name = "db1"
	}
	w, err := NewWriter(opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

const twoLines = "m,t=a f=1i 1\nm,t=b f=2i 2\n"

func TestWriteAPIs(t *testing.T) {
	for _, tc := range []struct {
		name              string
		opts              WriterOptions
		path, query, auth string
	}{
		{"v1", WriterOptions{API: APIv1, Database: "gpu", RetentionPolicy: "week", Username: "u", Password: "p"},
			"/write", "db=gpu&precision=ns&rp=week", "Basic " + basicAuth("u", "p")},
		{"v1-noauth", WriterOptions{Database: "gpu"}, "/write", "db=gpu&precision=ns", ""},
		{"v2", WriterOptions{API: APIv2, Organization: "org", Bucket: "b", Token: "tok"},
			"/api/v2/write", "bucket=b&org=org&precision=ns", "Token tok"},
		{"v3", WriterOptions{API: APIv3, Database: "gpu", Token: "tok", Gzip: true},
			"/api/v3/write_lp", "db=gpu&precision=nanosecond", "Bearer tok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			w := newTestWriter(t, rec, tc.opts)
			if err := w.Write(context.Background(), []byte(twoLines)); err != nil {
				t.Fatal(err)
			}
			r := rec.requests()
			if len(r) != 1 {
				t.Fatalf("%d requests, want 1", len(r))
			}
			got := r[0]
			if got.Method != "POST" || got.Path != tc.path || got.Query != tc.query || got.Auth != tc.auth || got.Body != twoLines {
				t.Fatalf("request %+v\nwant path %s query %s auth %q", got, tc.path, tc.query, tc.auth)
			}
			if (got.Encoding == "gzip") != tc.opts.Gzip {
				t.Fatalf("Content-Encoding %q with Gzip=%v", got.Encoding, tc.opts.Gzip)
			}
			if strings.Contains(w.Endpoint(), "tok") || strings.Contains(w.Endpoint(), ":p@") {
				t.Fatalf("endpoint %s holds a secret", w.Endpoint())
			}
		})
	}
}

func TestSplitPayload(t *testing.T) {
	rec := &recorder{}
	w := newTestWriter(t, rec, WriterOptions{Database: "gpu", MaxPayloadBytes: 30})
	var body strings.Builder
	for i := range 10 {
		body.WriteString("m,t=x f=" + strings.Repeat("1", i%3+1) + "i 1\n")
	}
	if err := w.Write(context.Background(), []byte(body.String())); err != nil {
		t.Fatal(err)
	}
	var joined strings.Builder
	reqs := rec.requests()
	for _, r := range reqs {
		if len(r.Body) > 30 || !strings.HasSuffix(r.Body, "\n") {
			t.Fatalf("part %q: over 30 bytes or cut inside a line", r.Body)
		}
		joined.WriteString(r.Body)
	}
	if len(reqs) < 4 || joined.String() != body.String() {
		t.Fatalf("%d parts joined to %q, want %q", len(reqs), joined.String(), body.String())
	}
}

// A Write makes one request per part and hands a failure back at once,
// classified: retrying is its caller's (the pump's or the buffer's). The
// next Write after a failure counts as a retry.
func TestOneAttempt(t *testing.T) {
	ctx := context.Background()
	t.Run("5xx then ok", func(t *testing.T) {
		rec := &recorder{replies: []reply{{status: 503}, {status: 500}, {status: 204}}}
		w := newTestWriter(t, rec, WriterOptions{Database: "gpu"})
		for i, want := range []record.ErrorKind{record.KindUnavailable, record.KindRetryable} {
			err := w.Write(ctx, []byte(twoLines))
			if got := record.Classify(err); err == nil || got != want {
				t.Fatalf("write %d: %v (%v), want %v", i, err, got, want)
			}
			if n := len(rec.requests()); n != i+1 {
				t.Fatalf("write %d: %d requests, want %d (one attempt per Write)", i, n, i+1)
			}
		}
		if err := w.Write(ctx, []byte(twoLines)); err != nil {
			t.Fatal(err)
		}
		if st := w.Stats(); st.Requests != 3 || st.Retries != 2 {
			t.Fatalf("stats %+v; want 3 requests, 2 retries", st)
		}
	})
	t.Run("429 with Retry-After", func(t *testing.T) {
		rec := &recorder{replies: []reply{{status: 503, body: `{"error":"overloaded"}`, headers: map[string]string{"Retry-After": "60"}}}}
		w := newTestWriter(t, rec, WriterOptions{Database: "gpu"})
		err := w.Write(ctx, []byte(twoLines))
		if record.Classify(err) != record.KindUnavailable || len(rec.requests()) != 1 {
			t.Fatalf("err %v (%v), %d requests; want one request, unavailable", err, record.Classify(err), len(rec.requests()))
		}
		if !strings.Contains(err.Error(), `influxdb "db1"`) || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "overloaded") {
			t.Fatalf("error %q does not name the output, status and message", err)
		}
		if d, ok := record.RetryAfterOf(err); !ok || d != time.Minute {
			t.Fatalf("retry hint %v %v, want the server's Retry-After: 60 (1m)", d, ok)
		}
	})
	t.Run("network error", func(t *testing.T) {
		w, err := NewWriter(WriterOptions{Name: "down", URL: "http://127.0.0.1:1", Database: "gpu"})
		if err != nil {
			t.Fatal(err)
		}
		err = w.Write(ctx, []byte(twoLines))
		if record.Classify(err) != record.KindUnavailable || !strings.Contains(err.Error(), `influxdb "down"`) ||
			!strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("err %v", err)
		}
		if st := w.Stats(); st.Requests != 1 {
			t.Fatalf("stats %+v: want one request", st)
		}
	})
	t.Run("no answer: retryable, not past the deadline", func(t *testing.T) {
		// a server that accepts and never answers, and a request timeout
		// longer than the Write's deadline: the deadline ends the request
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		w, err := NewWriter(WriterOptions{Name: "hole", URL: srv.URL, Database: "gpu", Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		err = w.Write(dctx, []byte(twoLines))
		if record.Classify(err) != record.KindRetryable || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v (%v): want retryable, the deadline's", err, record.Classify(err))
		}
	})
}

// The error a Write gives up with has the kind its last answer calls for:
// no server, 429 and 502–504 are unavailable (the sink is down or
// overloaded), other 5xx retryable, 4xx permanent.
func TestWriteErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   record.ErrorKind
	}{
		{429, record.KindUnavailable}, {502, record.KindUnavailable}, {503, record.KindUnavailable},
		{504, record.KindUnavailable}, {500, record.KindRetryable}, {507, record.KindRetryable},
		{400, record.KindPermanent}, {413, record.KindPermanent},
		// Not ready (database missing, credentials not yet valid): held
		// like an outage.
		{404, record.KindUnavailable}, {401, record.KindUnavailable}, {403, record.KindUnavailable},
	} {
		rec := &recorder{replies: []reply{{status: tc.status, body: `{"error":"x"}`}}}
		w := newTestWriter(t, rec, WriterOptions{Database: "gpu"})
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := w.Write(dctx, []byte(twoLines))
		cancel()
		if got := record.Classify(err); got != tc.want {
			t.Errorf("%d: %v (%v), want %v", tc.status, got, err, tc.want)
		}
	}
}

func TestClientErrorsNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		api    string
		status int
		body   string
		want   []string
	}{
		{"partial write", APIv1, 400, `{"error":"partial write: field type conflict: input field \"power_draw\" on measurement \"nvidia_smi\" is type integer, already exists as type float dropped=3"}`,
			[]string{"400 Bad Request", "field type conflict", "valid lines were stored"}},
		{"v2 on a 1.x server", APIv2, 404, "404 page not found\n", []string{"no v2 write endpoint", "InfluxDB 1.x speaks only v1"}},
		{"413", APIv1, 413, "", []string{"413", "max_payload_bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{replies: []reply{{status: tc.status, body: tc.body}}}
			opts := WriterOptions{API: tc.api, Database: "gpu", Bucket: "b", Organization: "o", Token: "t"}
			if tc.api == APIv2 {
				opts.Database = ""
			}
			w := newTestWriter(t, rec, opts)
			err := w.Write(context.Background(), []byte(twoLines))
			if !record.IsPermanent(err) {
				t.Fatalf("err %v: want record.Permanent", err)
			}
			var we *WriteError
			if !errors.As(err, &we) || we.StatusCode != tc.status {
				t.Fatalf("err %v: want a *WriteError with status %d", err, tc.status)
			}
			for _, s := range append(tc.want, `influxdb "db1"`) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if n := len(rec.requests()); n != 1 {
				t.Fatalf("%d requests: want one request, no retry", n)
			}
			if tc.status == 400 {
				if st := w.Stats(); st.PartialWrites != 1 || st.RejectedPoints != 3 {
					t.Fatalf("stats %+v: want 1 partial write, 3 rejected", st)
				}
			}
		})
	}
}

func TestGzipBody(t *testing.T) {
	rec := &recorder{}
	w := newTestWriter(t, rec, WriterOptions{Database: "gpu", Gzip: true})
	big := bytes.Repeat([]byte("nvidia_smi,index=0 power_draw=100 1\n"), 1000)
	for range 2 { // the gzip writer is reused
		if err := w.Write(context.Background(), big); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rec.requests() {
		if r.Body != string(big) || r.Encoding != "gzip" {
			t.Fatalf("gzip body did not round-trip")
		}
	}
	if st := w.Stats(); st.BytesSent >= uint64(len(big)) {
		t.Fatalf("sent %d bytes for %d: not compressed", st.BytesSent, len(big))
	}
}
