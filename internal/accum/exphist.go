package accum

import (
	"math"
	"slices"
)

// ExpHistogram accumulates a window's values as an OpenTelemetry
// exponential histogram: bucket i at scale s holds the values in
// (base^i, base^(i+1)], base = 2^(2^-s); zeros are counted apart. It
// starts at the finest scale (MaxExpScale) and halves its resolution
// (scale - 1, merging bucket pairs) whenever the values of one sign would
// need more than MaxSize buckets, as the OpenTelemetry SDK does: the result
// is the finest histogram of at most MaxSize buckets a sign that holds
// every value. NaN and infinite values are not added (Add reports false).
//
// The aggregate wrapper keeps one per window for an output that asks for
// its windows' distributions (the OpenTelemetry output). A plain value owned by its caller;
// not safe for concurrent use. The zero value is empty with MaxSize
// DefaultExpSize.
type ExpHistogram struct {
	// MaxSize bounds the buckets of each sign (0: DefaultExpSize).
	MaxSize int
	// Scale is the current scale (meaningful once a value was added).
	Scale int32
	// ZeroCount counts the values that are exactly 0.
	ZeroCount uint64
	// Positive and Negative hold the buckets of the values above and
	// below 0 (the latter by magnitude).
	Positive, Negative ExpBuckets

	started bool
}

// ExpBuckets are consecutive buckets from index Offset.
type ExpBuckets struct {
	Offset int32
	Counts []uint64
}

// MaxExpScale is the finest scale (OpenTelemetry's largest useful one).
const MaxExpScale = 20

// DefaultExpSize is the OpenTelemetry SDK's default bucket count.
const DefaultExpSize = 160

// Add adds v; false when v is NaN or infinite (not added).
func (h *ExpHistogram) Add(v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	if !h.started {
		h.started, h.Scale = true, MaxExpScale
	}
	if v == 0 {
		h.ZeroCount++
		return true
	}
	b := &h.Positive
	if v < 0 {
		b, v = &h.Negative, -v
	}
	idx := ExpIndex(v, h.Scale)
	if c := h.changeFor(b, idx); c > 0 {
		h.downscale(c)
		idx = ExpIndex(v, h.Scale)
	}
	b.add(idx)
	return true
}

// Count returns the number of values added.
func (h *ExpHistogram) Count() uint64 {
	n := h.ZeroCount
	for _, c := range h.Positive.Counts {
		n += c
	}
	for _, c := range h.Negative.Counts {
		n += c
	}
	return n
}

// Restore sets h to the histogram of scale with zero values and the
// buckets pos and neg (their counts are copied), as if its values had been
// added: further values go on from there (a window taken up from a
// journal). MaxSize is kept.
func (h *ExpHistogram) Restore(scale int32, zero uint64, pos, neg ExpBuckets) {
	*h = ExpHistogram{MaxSize: h.MaxSize, Scale: scale, ZeroCount: zero,
		Positive: ExpBuckets{Offset: pos.Offset, Counts: slices.Clone(pos.Counts)},
		Negative: ExpBuckets{Offset: neg.Offset, Counts: slices.Clone(neg.Counts)}}
	h.started = h.Count() > 0
}

func (h *ExpHistogram) size() int {
	if h.MaxSize <= 0 {
		return DefaultExpSize
	}
	return h.MaxSize
}

// changeFor returns by how much the scale must drop for b to take index
// idx within MaxSize buckets.
func (h *ExpHistogram) changeFor(b *ExpBuckets, idx int32) int32 {
	lo, hi := idx, idx
	if len(b.Counts) > 0 {
		lo, hi = min(b.Offset, idx), max(b.Offset+int32(len(b.Counts))-1, idx)
	}
	var c int32
	for int64(hi>>c)-int64(lo>>c)+1 > int64(h.size()) {
		c++
	}
	return c
}

// downscale lowers the scale by c, merging buckets (both signs).
func (h *ExpHistogram) downscale(c int32) {
	for _, b := range []*ExpBuckets{&h.Positive, &h.Negative} {
		if len(b.Counts) == 0 {
			continue
		}
		off := b.Offset >> c
		last := (b.Offset + int32(len(b.Counts)) - 1) >> c
		counts := make([]uint64, last-off+1)
		for i, n := range b.Counts {
			counts[((b.Offset+int32(i))>>c)-off] += n
		}
		b.Offset, b.Counts = off, counts
	}
	h.Scale -= c
}

func (b *ExpBuckets) add(idx int32) {
	switch {
	case len(b.Counts) == 0:
		b.Offset, b.Counts = idx, append(b.Counts[:0], 1)
		return
	case idx < b.Offset:
		grown := make([]uint64, int(b.Offset-idx)+len(b.Counts))
		copy(grown[b.Offset-idx:], b.Counts)
		b.Offset, b.Counts = idx, grown
	case int(idx-b.Offset) >= len(b.Counts):
		b.Counts = append(b.Counts, make([]uint64, int(idx-b.Offset)-len(b.Counts)+1)...)
	}
	b.Counts[idx-b.Offset]++
}

// ExpIndex returns the index of the bucket of v (> 0, finite) at scale:
// the i with base^i < v <= base^(i+1). Exact powers of two are exact; other
// values near a bucket boundary may land in the neighbouring bucket (the
// logarithm's rounding), as in the OpenTelemetry SDK's logarithm mapping.
func ExpIndex(v float64, scale int32) int32 {
	frac, exp := math.Frexp(v) // v = frac × 2^exp, frac in [0.5, 1)
	if frac == 0.5 {           // v = 2^(exp-1): the upper bound of its bucket
		if scale <= 0 {
			return (int32(exp) - 2) >> -scale
		}
		return (int32(exp-1) << scale) - 1
	}
	if scale <= 0 {
		return (int32(exp) - 1) >> -scale
	}
	return int32(math.Ceil(math.Log(v)*math.Ldexp(math.Log2E, int(scale)))) - 1
}
