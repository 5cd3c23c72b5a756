package opentelemetry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// httpExporter posts to one OTLP/HTTP endpoint's /v1/metrics.
type httpExporter struct {
	url     string
	client  *http.Client
	headers http.Header
	gzip    bool
	gz      outputs.Gzipper
	o       *Output
}

func newHTTPExporter(ep endpoint, opts *Options, o *Output) *httpExporter {
	tr := opts.HTTPTransport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = opts.TLS
		t.MaxIdleConnsPerHost = 4
		tr = t
	}
	h := http.Header{}
	for k, v := range opts.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/x-protobuf")
	h.Set("User-Agent", "gpusampler")
	if opts.Gzip {
		h.Set("Content-Encoding", "gzip")
	}
	return &httpExporter{url: ep.target, headers: h, gzip: opts.Gzip, o: o,
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (h *httpExporter) target() string { return h.url }
func (h *httpExporter) close()         { h.client.CloseIdleConnections() }

func (h *httpExporter) export(ctx context.Context, body []byte) (int64, string, error) {
	payload := body
	if h.gzip {
		payload = h.gz.Compress(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(payload))
	if err != nil {
		return 0, "", record.Permanent(err)
	}
	req.Header = h.headers.Clone()
	h.o.st.wire.Add(uint64(len(payload)))
	resp, err := h.client.Do(req)
	if err != nil {
		if h.gzip {
			h.gz.Release() // the transport may still read payload after Do returned
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the message names the endpoint already
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return 0, "", err // no answer in time: this attempt failed (retryable)
		}
		return 0, "", record.Unavailable(err) // no collector to talk to
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		rejected, text := decodeExportResponse(msg)
		return rejected, text, nil
	}
	e := &HTTPError{StatusCode: resp.StatusCode, Message: httpMessage(resp.Header.Get("Content-Type"), msg)}
	e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		// Throttled, or a collector (or the proxy in front of one) down:
		// OTLP/HTTP's retryable statuses.
		return 0, "", record.Unavailable(record.RetryAfter(e, e.RetryAfter))
	case http.StatusUnauthorized, http.StatusForbidden:
		// The request is fine; the credentials are not (yet).
		return 0, "", record.Unavailable(e)
	}
	if resp.StatusCode >= 500 {
		return 0, "", record.RetryAfter(e, e.RetryAfter)
	}
	return 0, "", record.Permanent(e)
}

// HTTPError is an export the collector answered with a non-2xx status.
type HTTPError struct {
	StatusCode int
	// Message is the collector's google.rpc.Status message, or the body's
	// text.
	Message string
	// RetryAfter is the Retry-After header's delay (0: none).
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	return s
}

// httpMessage is the error text of a response body: OTLP/HTTP answers
// failures with a google.rpc.Status in the request's encoding.
func httpMessage(contentType string, body []byte) string {
	if strings.HasPrefix(contentType, "application/x-protobuf") {
		var st status.Status
		if proto.Unmarshal(body, &st) == nil && st.GetMessage() != "" {
			return st.GetMessage()
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 512 {
		s = s[:512] + "…"
	}
	return s
}

// retryAfter parses a Retry-After header: seconds or an HTTP date (0 when
// absent or past).
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(h); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// decodeExportResponse reads an ExportMetricsServiceResponse's partial
// success: field 1 (ExportMetricsPartialSuccess) holds rejected_data_points
// (1, int64) and error_message (2, string). An empty body is a full
// success; one that does not parse is taken as one too (the export was
// accepted: 2xx, or gRPC OK), its message saying so.
func decodeExportResponse(b []byte) (rejected int64, msg string) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, badResponse
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			ps, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, badResponse
			}
			b = b[n:]
			for len(ps) > 0 {
				num, typ, n := protowire.ConsumeTag(ps)
				if n < 0 {
					return 0, badResponse
				}
				ps = ps[n:]
				switch {
				case num == 1 && typ == protowire.VarintType:
					v, n := protowire.ConsumeVarint(ps)
					if n < 0 {
						return 0, badResponse
					}
					rejected, ps = int64(v), ps[n:]
				case num == 2 && typ == protowire.BytesType:
					v, n := protowire.ConsumeBytes(ps)
					if n < 0 {
						return 0, badResponse
					}
					msg, ps = string(v), ps[n:]
				default:
					n := protowire.ConsumeFieldValue(num, typ, ps)
					if n < 0 {
						return 0, badResponse
					}
					ps = ps[n:]
				}
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, badResponse
		}
		b = b[n:]
	}
	return rejected, msg
}

// badResponse is the partial-success message of a response that does not
// parse.
const badResponse = "(the collector's response does not parse as an ExportMetricsServiceResponse)"
