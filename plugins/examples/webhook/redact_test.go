package webhook

import (
	"net/http"
	"strings"
	"testing"
)

// A failed post names the scheme and host of the URL, never its path
// (the token of a Slack or Teams webhook).
func TestPostErrorRedactsURL(t *testing.T) {
	// a closed port: the post fails with a *url.Error
	o := &Output{url: "http://127.0.0.1:1/services/T000/S3CRET-TOKEN?key=S3CRET-KEY", client: &http.Client{}}
	err := o.postOnce([]byte("{}"))
	if err == nil {
		t.Fatal("post to a closed port succeeded")
	}
	if msg := err.Error(); strings.Contains(msg, "S3CRET") || !strings.Contains(msg, "http://127.0.0.1:1/…") {
		t.Fatalf("error %q: want the host, not the secret path", msg)
	}
	for raw, want := range map[string]string{
		"https://hooks.slack.com/services/T/B/X": "https://hooks.slack.com/…",
		"https://user:pw@example.com":            "https://example.com/…",
		"https://example.com":                    "https://example.com",
		"ftp://x":                                "ftp://x",
		"::":                                     "…",
	} {
		if got := redactURL(raw); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}
