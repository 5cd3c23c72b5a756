package outputs

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"
)

// Compress reuses its buffer; after Release the next Compress leaves the
// body it returned before untouched (a failed request's transport may
// still be reading it).
func TestGzipperRelease(t *testing.T) {
	var g Gzipper
	unzip := func(b []byte) string {
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	first := g.Compress([]byte("first body"))
	second := g.Compress([]byte("second, longer body"))
	if &second[0] != &first[0] {
		t.Fatal("Compress did not reuse its buffer")
	}
	g.Release()
	third := g.Compress([]byte("third body, after a failed request"))
	if &third[0] == &second[0] {
		t.Fatal("Compress after Release wrote into the released buffer")
	}
	if got := unzip(second); got != "second, longer body" {
		t.Fatalf("released body = %q", got)
	}
	if got := unzip(third); got != "third body, after a failed request" {
		t.Fatalf("third body = %q", got)
	}
}
