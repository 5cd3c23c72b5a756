package appconfig

import (
	"net"
	"path/filepath"

	"github.com/gpusampler/gpusampler/outputs"
)

// checkShared reports two output blocks that would share what only one
// can own: a disk buffer's directory (each buffer locks it and keeps its
// cursor and segments there) or a listening address (the second could not
// bind it). The problem is placed at the later block's key and names the
// earlier block with its file and line.
func checkShared(outs []*Output) {
	dirs := map[string]*Output{}
	var listening []*Output
	for _, o := range outs {
		if o.Table == nil {
			continue
		}
		if o.Buffer.Kind == "disk" && o.Buffer.Dir != "" {
			d := filepath.Clean(o.Buffer.Dir)
			if abs, err := filepath.Abs(d); err == nil {
				d = abs
			}
			if p, dup := dirs[d]; dup {
				o.Table.Errorf("buffer_dir", "%q is also the buffer_dir of %s (%s:%d): each disk buffer needs a directory of its own",
					o.Buffer.Dir, p.Table.Path(), p.Table.File(), p.Table.Line("buffer_dir"))
			} else {
				dirs[d] = o
			}
		}
		l, ok := o.Options.(outputs.Listener)
		if !ok {
			continue
		}
		for _, p := range listening {
			pl := p.Options.(outputs.Listener)
			if sameListenAddress(l.ListenAddress(), pl.ListenAddress()) {
				dflt := ""
				if !o.Table.Has("listen") {
					dflt = " (the default)"
				}
				o.Table.Errorf("listen", "%q%s takes the address that %s (%s:%d) listens on, %q: two outputs cannot listen on one address",
					l.ListenAddress(), dflt, p.Table.Path(), p.Table.File(), p.Table.Line("listen"), pl.ListenAddress())
				break
			}
		}
		listening = append(listening, o)
	}
}

// sameListenAddress reports whether listening on a and on b would collide:
// the same port (not 0, which picks a free one) on the same host, or on
// any host where one of them listens on every address ("", 0.0.0.0, ::).
func sameListenAddress(a, b string) bool {
	ah, ap, errA := net.SplitHostPort(a)
	bh, bp, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || ap != bp || ap == "0" {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ah == bh || wildcard(ah) || wildcard(bh)
}
