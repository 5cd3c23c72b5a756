package outputs

import (
	"bytes"
	"compress/gzip"

	"github.com/gpusampler/gpusampler/config"
)

// ParseServers decodes a block's sinks given as one (key one, a string) or
// several for failover (key many, an array): both at once, or an empty
// array, is a problem at many; neither gives def. what names the sinks in
// the messages ("server", "collector").
func ParseServers(t *config.Table, one, many string, def []string, what string) []string {
	var single string
	var list []string
	t.String(one, &single)
	t.Strings(many, &list)
	switch {
	case t.Has(one) && t.Has(many):
		t.Errorf(many, "set %s or %s, not both (%s = [...] lists every %s to fail over between, %s one)", one, many, many, what, one)
	case t.Has(one):
		return []string{single}
	case !t.Has(many):
		return def
	case len(list) == 0:
		t.Errorf(many, "empty: list at least one %s", what)
	}
	return list
}

// Gzipper compresses request bodies into a buffer it reuses (BestSpeed:
// sinks answer sooner than a smaller body would save). Not safe for
// concurrent use.
type Gzipper struct {
	zw  *gzip.Writer
	buf bytes.Buffer
}

// Compress returns body gzipped, valid until the next call.
func (g *Gzipper) Compress(body []byte) []byte {
	g.buf.Reset()
	if g.zw == nil {
		g.zw, _ = gzip.NewWriterLevel(&g.buf, gzip.BestSpeed)
	} else {
		g.zw.Reset(&g.buf)
	}
	g.zw.Write(body) // a bytes.Buffer does not fail
	g.zw.Close()
	return g.buf.Bytes()
}

// Release forgets the buffer the last Compress returned, so that the next
// Compress writes into a new one. Call it after a request that failed: an
// HTTP transport (or gRPC's writer) may still be reading a body after the
// call that sent it returned with an error, and must not see it rewritten.
func (g *Gzipper) Release() { g.buf = bytes.Buffer{} }
