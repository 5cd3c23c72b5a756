package influxdb

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// A "not ready" answer — the database or bucket missing (404), credentials
// not (yet) valid (401, 403) — is unavailable, not permanent: a buffer
// holds the lines as in an outage instead of dropping them as malformed.
// The error still names the output and says what to do.
func TestNotReadyIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		api    string
		status int
		body   string
		want   []string
	}{
		{"v1 401", APIv1, 401, `{"error":"authorization failed"}`, []string{"401", "authorization failed", "check username and password"}},
		{"v2 401", APIv2, 401, `{"code":"unauthorized","message":"unauthorized access"}`, []string{"401", "unauthorized access", "wrong or missing token"}},
		{"v2 403", APIv2, 403, `{"code":"forbidden","message":"insufficient permissions"}`, []string{"403", "may not write to bucket"}},
		{"v1 404", APIv1, 404, `{"error":"database not found: \"gpu\""}`, []string{"404", `database not found`, `database "gpu" does not exist`, "lines are kept"}},
		{"v3 404", APIv3, 404, `{"error":"database not found"}`, []string{"404", `database "gpu" does not exist`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{replies: []reply{{status: tc.status, body: tc.body}}}
			opts := WriterOptions{API: tc.api, Database: "gpu", Bucket: "b", Organization: "o", Token: "t"}
			if tc.api == APIv2 {
				opts.Database = ""
			}
			w := newTestWriter(t, rec, opts)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := w.Write(ctx, []byte(twoLines))
			if got := record.Classify(err); got != record.KindUnavailable {
				t.Fatalf("err %v: %v, want unavailable", err, got)
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
		})
	}
}

// With CreateDatabase (skip_database_creation = false, Telegraf's default),
// a write that finds the database missing asks the server to create it
// (CREATE DATABASE on /query) and fails unavailable; the next write
// succeeds. Without it nothing but the write is sent.
func TestCreatesMissingDatabase(t *testing.T) {
	for _, create := range []bool{true, false} {
		rec := &recorder{replies: []reply{{status: 404, body: `{"error":"database not found: \"gpu\""}`},
			{status: 200, body: `{"results":[{"statement_id":0}]}`}, {status: 204}}}
		w := newTestWriter(t, rec, WriterOptions{Database: "gpu", CreateDatabase: create})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := w.Write(ctx, []byte(twoLines))
		cancel()
		if record.Classify(err) != record.KindUnavailable {
			t.Fatalf("create=%v: err %v, want unavailable", create, err)
		}
		reqs := rec.requests()
		if !create {
			if len(reqs) != 1 || reqs[0].Path != "/write" {
				t.Fatalf("create=false: requests %+v, want the write alone", reqs)
			}
			continue
		}
		if len(reqs) != 2 || reqs[1].Path != "/query" || !strings.Contains(reqs[1].Body, "CREATE+DATABASE+%22gpu%22") {
			t.Fatalf("requests %+v, want the write then CREATE DATABASE \"gpu\" on /query", reqs)
		}
		if err := w.Write(context.Background(), []byte(twoLines)); err != nil {
			t.Fatalf("write after the database was created: %v", err)
		}
	}
}
