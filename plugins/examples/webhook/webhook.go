// Package webhook is an output plugin that posts GPU alerts to a chat
// webhook (Slack, Microsoft Teams, Mattermost, or any URL taking JSON):
// gpusampler's events (XID errors, ECC, throttling, lost devices, sample
// loss) and threshold crossings it detects in the samples itself
// ("temperature_gpu > 85"), batched into one message per interval and
// retried on failure.
//
// It runs as a plugin (cmd/gpusampler-webhook: main is one line) and
// shows every part of the SDK: Configure with key errors, Write that never
// blocks on the network, Health, Close that flushes.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/plugins/sdk"
	"github.com/gpusampler/gpusampler/record"
)

// Defaults.
const (
	DefaultBatchInterval = 10 * time.Second
	DefaultTimeout       = 5 * time.Second
	DefaultMaxRetries    = 3
	// queueLimit bounds the alerts waiting for the next post.
	queueLimit = 1000
	// perMessage bounds the alerts in one post.
	perMessage = 20
)

// DefaultEvents are the event kinds forwarded by default.
var DefaultEvents = []string{"xid", "ecc", "throttle", "threshold", "device_lost", "device_recovered", "sample_loss"}

// threshold is one "METRIC > VALUE" / "METRIC < VALUE" rule.
type threshold struct {
	text   string
	metric catalog.MetricID
	name   string
	above  bool
	value  float64
}

// Output is the webhook output. Build it with New; the SDK calls Configure.
type Output struct {
	url           string
	format        string
	events        []string
	thresholds    []threshold
	batchInterval time.Duration
	timeout       time.Duration
	maxRetries    int
	host          string
	log           interface{ Warn(string, ...any) }
	client        *http.Client

	mu      sync.Mutex
	queue   []string
	dropped int
	active  map[[2]int]bool // (device, rule) → currently crossed
	devices map[int]record.Device
	closed  bool
	lastErr error
	// lost counts alerts whose post failed for good since the last Write
	// reported it (lostErr is the last such post's error); posted, lostTotal
	// and queueDropped are the counters ReportStats sends.
	lost                            int
	lostErr                         error
	posted, lostTotal, queueDropped uint64

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// New returns an unconfigured webhook output.
func New() *Output { return &Output{} }

// Configure implements sdk.Configurer.
func (o *Output) Configure(t *config.Table, env sdk.Env) error {
	t.String("url", &o.url)
	if !t.Has("url") {
		t.Errorf("", "url is required (the webhook URL)")
	} else if u, err := url.Parse(o.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		t.Errorf("url", "%q: want an http or https URL", redactURL(o.url))
	}
	o.format = "slack"
	t.OneOf("format", &o.format, "slack", "teams", "json")
	o.events = DefaultEvents
	t.Strings("events", &o.events)
	var rules []string
	t.Strings("thresholds", &rules)
	for i, r := range rules {
		th, err := parseThreshold(r, env.Catalog)
		if err != nil {
			t.Errorf("thresholds["+strconv.Itoa(i)+"]", "%v", err)
			continue
		}
		o.thresholds = append(o.thresholds, th)
	}
	o.batchInterval = DefaultBatchInterval
	t.Duration("batch_interval", &o.batchInterval)
	o.timeout = DefaultTimeout
	t.Duration("timeout", &o.timeout)
	o.maxRetries = DefaultMaxRetries
	t.Int("max_retries", &o.maxRetries, 0, 10)
	if t.Err() != nil {
		return nil // the SDK reports the key errors
	}
	o.host, o.log = env.Host, env.Logger
	o.client = &http.Client{Timeout: o.timeout}
	o.active = map[[2]int]bool{}
	o.devices = map[int]record.Device{}
	o.kick, o.stop, o.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go o.loop()
	return nil
}

func parseThreshold(s string, cat *catalog.Catalog) (threshold, error) {
	i := strings.IndexAny(s, "<>")
	if i < 0 {
		return threshold{}, fmt.Errorf("%q: want \"METRIC > VALUE\" or \"METRIC < VALUE\"", s)
	}
	name := strings.TrimSpace(s[:i])
	v, err := strconv.ParseFloat(strings.TrimSpace(s[i+1:]), 64)
	if err != nil {
		return threshold{}, fmt.Errorf("%q: %q is not a number", s, strings.TrimSpace(s[i+1:]))
	}
	if cat == nil {
		cat = catalog.Default()
	}
	m, ok := cat.Lookup(name)
	if !ok {
		return threshold{}, fmt.Errorf("%q: unknown metric %q (see gpusampler metrics)", s, name)
	}
	return threshold{text: strings.Join(strings.Fields(s), " "), metric: m.ID, name: name, above: s[i] == '>', value: v}, nil
}

// Write turns the batch into alerts and queues them; it never waits for
// the network. When alerts were lost since the last Write (a post failed
// after its retries), Write refuses the batch as permanent instead, naming
// how many: the host counts it as failed, so gpusampler's counters say that
// this output dropped something (alerts_lost in its counters says how
// much).
func (o *Output) Write(_ context.Context, b *record.Batch) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return record.ErrClosed
	}
	if o.lost > 0 {
		err := fmt.Errorf("webhook: %d alerts lost (their post failed after its retries): %w", o.lost, o.lostErr)
		o.lost, o.lostErr = 0, nil
		return record.Permanent(err)
	}
	for _, d := range b.Devices {
		o.devices[d.Index] = d
	}
	for _, e := range b.Events {
		if slices.Contains(o.events, string(e.Kind)) {
			o.enqueue(fmt.Sprintf("%s %s: %s", o.deviceName(e.Device), e.Kind, e.Message))
		}
	}
	for _, s := range b.Samples {
		for ri, th := range o.thresholds {
			if s.Metric != th.metric {
				continue
			}
			crossed := s.Value > th.value
			if !th.above {
				crossed = s.Value < th.value
			}
			key := [2]int{int(s.Device), ri}
			if crossed == o.active[key] {
				continue
			}
			o.active[key] = crossed
			state := "resolved"
			if crossed {
				state = "ALERT"
			}
			o.enqueue(fmt.Sprintf("%s %s: %s (now %g) at %s", o.deviceName(int(s.Device)), state, th.text, s.Value,
				s.Time().UTC().Format(time.RFC3339)))
		}
	}
	return nil
}

func (o *Output) deviceName(i int) string {
	d, ok := o.devices[i]
	if !ok {
		return fmt.Sprintf("[%s] GPU %d", o.host, i)
	}
	return fmt.Sprintf("[%s] GPU %d %s", o.host, i, d.DisplayName())
}

func (o *Output) enqueue(alert string) {
	if len(o.queue) >= queueLimit {
		o.dropped++
		o.queueDropped++
		return
	}
	o.queue = append(o.queue, alert)
}

// Health implements sdk.HealthChecker: the last post's error, if any.
func (o *Output) Health(context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastErr
}

// Close posts what is queued (bounded by the retry budget) and stops. It
// returns an error naming the alerts lost that no Write has reported.
func (o *Output) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	o.mu.Unlock()
	if o.stop == nil {
		return nil
	}
	close(o.stop)
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lost > 0 {
		err := fmt.Errorf("webhook: %d alerts lost (their post failed after its retries): %w", o.lost, o.lostErr)
		o.lost, o.lostErr = 0, nil
		return err
	}
	return nil
}

// ReportStats implements record.StatsReporter: alerts posted, alerts lost
// (their post failed after its retries) and alerts dropped because the
// queue was full, since the output was built.
func (o *Output) ReportStats(dst []record.Field) []record.Field {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append(dst, record.IntField("alerts_posted", o.posted), record.IntField("alerts_lost", o.lostTotal),
		record.IntField("alerts_queue_dropped", o.queueDropped))
}

func (o *Output) loop() {
	defer close(o.done)
	t := time.NewTicker(o.batchInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			o.flush()
		case <-o.stop:
			o.flush()
			return
		}
	}
}

// flush posts the queue in messages of at most perMessage alerts.
func (o *Output) flush() {
	o.mu.Lock()
	alerts := o.queue
	o.queue = nil
	dropped := o.dropped
	o.dropped = 0
	o.mu.Unlock()
	if dropped > 0 {
		alerts = append(alerts, fmt.Sprintf("[%s] %d more alerts dropped (queue full)", o.host, dropped))
	}
	for len(alerts) > 0 {
		n := min(len(alerts), perMessage)
		err := o.post(alerts[:n])
		o.mu.Lock()
		o.lastErr = err
		if err != nil {
			o.lost += n
			o.lostErr = err
			o.lostTotal += uint64(n)
		} else {
			o.posted += uint64(n)
		}
		o.mu.Unlock()
		if err != nil {
			o.log.Warn("webhook post failed; alerts lost", "alerts", n, "err", err)
		}
		alerts = alerts[n:]
	}
}

// payload renders alerts in the configured format.
func (o *Output) payload(alerts []string) ([]byte, error) {
	switch o.format {
	case "json":
		return json.Marshal(map[string]any{"source": "gpusampler", "host": o.host, "alerts": alerts})
	case "teams":
		return json.Marshal(map[string]any{"@type": "MessageCard", "summary": "gpusampler alerts",
			"text": strings.Join(alerts, "\n\n")})
	}
	return json.Marshal(map[string]any{"text": strings.Join(alerts, "\n")})
}

// post sends one message, retrying on network errors, 429 and 5xx with
// exponential backoff (1 s, 2 s, 4 s, ...).
func (o *Output) post(alerts []string) error {
	body, err := o.payload(alerts)
	if err != nil {
		return err
	}
	backoff := time.Second
	for attempt := 0; ; attempt++ {
		err = o.postOnce(body)
		var perm *permanentError
		if err == nil || errors.As(err, &perm) || attempt >= o.maxRetries {
			return err
		}
		select {
		case <-time.After(backoff):
		case <-o.stop:
			if attempt >= 1 {
				return err
			}
		}
		backoff *= 2
	}
}

type permanentError struct{ status int }

func (e *permanentError) Error() string { return fmt.Sprintf("webhook answered %d", e.status) }

func (o *Output) postOnce(body []byte) error {
	resp, err := o.client.Post(o.url, "application/json", bytes.NewReader(body))
	if err != nil {
		// The URL's path usually is the secret (a Slack or Teams token):
		// errors name the scheme and host only.
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redactURL(ue.URL)
		}
		return err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return &permanentError{resp.StatusCode}
}

// redactURL returns raw with everything after the host (path, query,
// fragment) and any user:password replaced by "…": what a log line or an
// error may show of a webhook URL, whose token is in its path.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "…"
	}
	r := u.Scheme + "://" + u.Host
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		r += "/…"
	}
	return r
}
