package backoff

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	for _, tc := range []struct {
		name         string
		initial, max time.Duration
		attempts     int
		want         []time.Duration
	}{
		{"doubling, capped", 100, 1000, 7, []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}},
		{"cap reached exactly", time.Second, 4 * time.Second, 4, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}},
		{"initial above the cap", 10 * time.Second, time.Second, 2, []time.Duration{time.Second, time.Second}},
		{"zero initial waits the cap", 0, time.Second, 2, []time.Duration{time.Second, time.Second}},
		{"zero cap", time.Second, 0, 2, []time.Duration{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []time.Duration
			for a := range tc.attempts {
				got = append(got, Delay(tc.initial, tc.max, a))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("delays %v, want %v", got, tc.want)
			}
		})
	}
}

// Far attempts neither overflow nor wrap: they wait the cap.
func TestDelayFarAttempts(t *testing.T) {
	for _, attempt := range []int{40, 61, 62, 63, 64, 200, math.MaxInt} {
		if d := Delay(time.Second, time.Minute, attempt); d != time.Minute {
			t.Errorf("attempt %d: %v, want the cap", attempt, d)
		}
	}
	if d := Delay(time.Second, time.Duration(math.MaxInt64), 62); d != time.Duration(math.MaxInt64) {
		t.Errorf("attempt 62 under the largest cap: %v", d)
	}
	if d := Delay(time.Second, time.Minute, -1); d != time.Second {
		t.Errorf("attempt -1: %v, want the initial delay", d)
	}
}

func TestJitter(t *testing.T) {
	for attempt, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		lo := Jitter(Delay(100, 1000, attempt), 0)
		hi := Jitter(Delay(100, 1000, attempt), 1)
		if lo != want/2 || hi != want {
			t.Errorf("attempt %d: jitter range [%v, %v], want [%v, %v]", attempt, lo, hi, want/2, want)
		}
	}
	if d := Jitter(Delay(time.Second, time.Minute, 200), 1); d != time.Minute {
		t.Errorf("attempt 200: %v, want the cap", d)
	}
	// An odd delay: the halves are d/2 and d-d/2.
	if lo, mid, hi := Jitter(7, 0), Jitter(7, 0.5), Jitter(7, 1); lo != 3 || mid != 5 || hi != 7 {
		t.Errorf("jitter of 7: %v, %v, %v; want 3, 5, 7", lo, mid, hi)
	}
}

// A Backoff walks the same delays as Delay, and Reset starts over.
func TestBackoff(t *testing.T) {
	b := Backoff{Initial: 5 * time.Second, Max: 60 * time.Second}
	var got []time.Duration
	for range 6 {
		got = append(got, b.Delay())
		b.Next()
	}
	s := time.Second
	if want := []time.Duration{5 * s, 10 * s, 20 * s, 40 * s, 60 * s, 60 * s}; !slices.Equal(got, want) {
		t.Errorf("delays %v, want %v", got, want)
	}
	b.Reset()
	if d := b.Delay(); d != 5*s {
		t.Errorf("after Reset: %v, want 5s", d)
	}
	for range 1000 {
		b.Next()
	}
	if d := b.Delay(); d != 60*s {
		t.Errorf("after 1000 retries: %v, want the cap", d)
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Nanosecond); err != nil {
		t.Errorf("Sleep(1ns) = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// An hour's wait ends at once when the context has ended.
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on an ended context = %v, want context.Canceled", err)
	}
}
