package config_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/config"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
}

// errs returns every problem recorded in t's file, as text.
func errs(t *testing.T, tb *config.Table) []string {
	t.Helper()
	err := tb.Err()
	if err == nil {
		return nil
	}
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("Err() = %T %v, want config.Errors", err, err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
	}
	return out
}

// TestDecodeGetters decodes a document with a byte-order mark, ${ENV}
// references and a literal "$${", and reads it with the typed getters:
// the leaf works on its own, without the application's config model.
func TestDecodeGetters(t *testing.T) {
	doc := "\xEF\xBB\xBF" + `
[sink]
url = "http://${HOST}:8086"
literal = "$${HOST}"
every = "250ms"
retries = 3
on = true
tags = ["a", "b"]
[sink.headers]
x = "${TOKEN}"
`
	root, err := config.Decode("s.toml", []byte(doc), env(map[string]string{"HOST": "db1", "TOKEN": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		URL, Literal string
		Every        time.Duration
		Retries      int
		On           bool
		Tags         []string
		Headers      map[string]string
	}
	var g got
	s := root.Sub("sink")
	s.String("url", &g.URL)
	s.String("literal", &g.Literal)
	s.Duration("every", &g.Every)
	s.Int("retries", &g.Retries, 0, 10)
	s.Bool("on", &g.On)
	s.Strings("tags", &g.Tags)
	g.Headers = s.Sub("headers").StringMap()
	s.Finish()
	root.Finish()
	want := got{URL: "http://db1:8086", Literal: "${HOST}", Every: 250 * time.Millisecond, Retries: 3, On: true,
		Tags: []string{"a", "b"}, Headers: map[string]string{"x": "s3cret"}}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("decoded %+v, want %+v", g, want)
	}
	if e := errs(t, root); e != nil {
		t.Errorf("problems: %q", e)
	}
	if got, want := s.EnvRefs(), []string{"HOST=db1", "TOKEN=s3cret"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EnvRefs() = %q, want %q", got, want)
	}
}

// TestDecodeProblems: every problem of a file is collected, in line order,
// each naming file, line and key; a value from the environment is never
// printed, its ${NAME} is.
func TestDecodeProblems(t *testing.T) {
	doc := `[sink]
url = "${MISSING}"
every = "${EVERY}"
big = "9999999999h"
retries = 30
bogus = 1
kind = "udp"
`
	root, err := config.Decode("s.toml", []byte(doc), env(map[string]string{"EVERY": "soon-ish"}))
	if err != nil {
		t.Fatal(err)
	}
	s := root.Sub("sink")
	var url, kind string
	var every, big time.Duration
	var retries int
	s.String("url", &url)
	s.Duration("every", &every)
	s.Duration("big", &big)
	s.Int("retries", &retries, 0, 10)
	s.OneOf("kind", &kind, "tcp", "unix")
	s.Finish()
	want := []string{
		"s.toml:2: sink.url: environment variable MISSING is not defined",
		`s.toml:3: sink.every: "${EVERY}" is not a duration (want e.g. "500us", "10ms", "1s")`,
		`s.toml:4: sink.big: "9999999999h" is out of range (at most 2562047h47m16.854775807s)`,
		"s.toml:5: sink.retries: 30 is out of range (want 0 to 10)",
		"s.toml:6: sink.bogus: unknown key (known: url, every, big, retries, kind)",
		`s.toml:7: sink.kind: unknown value "udp" (want one of: tcp, unix)`,
	}
	if got := errs(t, root); !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%q\nwant\n%q", got, want)
	}
}

// TestDecodeSyntaxError: a document that does not parse is one *Error
// naming the section and key of the bad line.
func TestDecodeSyntaxError(t *testing.T) {
	_, err := config.Decode("s.toml", []byte("[sink]\nurl = \"a\"\nevery = 250ms\n"), nil)
	var e *config.Error
	if !errors.As(err, &e) {
		t.Fatalf("Decode: %v (%T), want *config.Error", err, err)
	}
	if e.File != "s.toml" || e.Line != 3 || e.Key != "sink.every" {
		t.Errorf("error at %s:%d key %q, want s.toml:3 key sink.every (%v)", e.File, e.Line, e.Key, e)
	}
}

// TestElemAndErrorAt: array-table elements are tables of their own file,
// and ErrorAt places a problem found later (a plugin refusing its config)
// at the line of the key it names, with environment values redacted.
func TestElemAndErrorAt(t *testing.T) {
	doc := `[[out.x]]
a = 1
[[out.x]]
a = 2
  [out.x.config]
  url = "${URL}"
`
	root, err := config.Decode("s.toml", []byte(doc), env(map[string]string{"URL": "http://secret-host"}))
	if err != nil {
		t.Fatal(err)
	}
	out := root.Sub("out")
	v, ok := out.Take("x")
	blocks, _ := v.([]any)
	if !ok || len(blocks) != 2 {
		t.Fatalf("Take(x) = %v, %v", v, ok)
	}
	second := out.Elem("x[1]", blocks[1].(map[string]any))
	if got := second.Path(); got != "out.x[1]" {
		t.Errorf("Path() = %q, want out.x[1]", got)
	}
	got := second.ErrorAt("config.url", "cannot reach http://secret-host")
	want := &config.Error{File: "s.toml", Line: 6, Key: "out.x[1].config.url", Msg: "cannot reach ${URL}"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ErrorAt = %+v, want %+v", got, want)
	}
	if got, want := second.EnvRefs(), []string{"URL=http://secret-host"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EnvRefs() = %q, want %q", got, want)
	}
	first := out.Elem("x[0]", blocks[0].(map[string]any))
	if refs := first.EnvRefs(); len(refs) != 0 {
		t.Errorf("first block's EnvRefs() = %q, want none", refs)
	}
	// Written gives the block back as written, the config's own values
	// untouched.
	want2 := map[string]any{"a": int64(2), "config": map[string]any{"url": "${URL}"}}
	if got := second.Written(); !reflect.DeepEqual(got, want2) {
		t.Errorf("Written() = %v, want %v", got, want2)
	}
	if got := second.Raw()["config"].(map[string]any)["url"]; got != "http://secret-host" {
		t.Errorf("after Written, Raw() config.url = %v", got)
	}
}

// A value from ${NAME} never shows in a problem, in any form a message
// holds it: as is, quoted by %q (a '"' escaped), or in part (the bad
// escape a URL parser quotes).
func TestErrorsNeverShowExpandedValues(t *testing.T) {
	for _, tc := range []struct{ secret, msg, want string }{
		{"hunter2", `"http://u:hunter2@h" is not a URL`, `"http://u:${PW}@h" is not a URL`},
		{`sk"ret2x`, fmt.Sprintf("%q is not a URL: net/url: invalid userinfo", `http://u:sk"ret2x@h`),
			`"http://u:${PW}@h" is not a URL: net/url: invalid userinfo`},
		{"tok%en", `"http://u:${PW}@h" is not a URL: invalid URL escape "%en"`,
			`"http://u:${PW}@h" is not a URL: invalid URL escape (part of ${PW})`},
		{"pässwörd\xff", fmt.Sprintf("%q: bad", "pässwörd\xff"), `"${PW}": bad`},
	} {
		root, err := config.Decode("s.toml", []byte(`url = "http://u:${PW}@h"`), env(map[string]string{"PW": tc.secret}))
		if err != nil {
			t.Fatal(err)
		}
		var url string
		root.String("url", &url)
		root.Errorf("url", "%s", tc.msg)
		got := root.Err().Error()
		if want := "s.toml:1: url: " + tc.want; got != want {
			t.Errorf("secret %q: got %s\nwant %s", tc.secret, got, want)
		}
	}
}

// A huge key or value is shown by its start and its length, not echoed
// whole.
func TestErrorsElideHugeKeysAndValues(t *testing.T) {
	huge := strings.Repeat("k", 1<<20) // as large as a config file may be
	doc := "[agent]\n" + huge + " = 1\nformat = \"" + huge + "\"\n"
	root, err := config.Decode("s.toml", []byte(doc), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	agent := root.Sub("agent")
	var format string
	agent.OneOf("format", &format, "json", "influx")
	agent.Finish()
	got := root.Err().Error()
	if len(got) > 1000 {
		t.Fatalf("%d bytes of errors for a 1 MiB key and value: %.300s", len(got), got)
	}
	for _, want := range []string{"s.toml:2: agent.kkkk", "… (1048582 bytes)", "s.toml:3: agent.format", "… (1048578 bytes)"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
}
