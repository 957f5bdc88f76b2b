package apimetrics

import (
	"math"
	"sort"
)

// Bucket is one cumulative bucket of a histogram: how many observations
// were at most UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Histogram is a classic Prometheus histogram: cumulative buckets sorted
// by bound, the last one +Inf, with the observations' count and sum.
type Histogram struct {
	Buckets    []Bucket
	Count, Sum float64
}

// Sub returns h minus an earlier scrape of the same series, bucket by
// bucket: the observations made in between. ok is false when the two
// cannot be subtracted: other bounds, or a bucket that went down (the
// apiserver restarted).
func (h Histogram) Sub(earlier Histogram) (Histogram, bool) {
	if len(earlier.Buckets) == 0 {
		return h, earlier.Count == 0
	}
	if len(h.Buckets) != len(earlier.Buckets) || h.Count < earlier.Count {
		return Histogram{}, false
	}
	out := Histogram{Count: h.Count - earlier.Count, Sum: h.Sum - earlier.Sum, Buckets: make([]Bucket, len(h.Buckets))}
	for i, b := range h.Buckets {
		e := earlier.Buckets[i]
		if b.UpperBound != e.UpperBound || b.Count < e.Count {
			return Histogram{}, false
		}
		out.Buckets[i] = Bucket{UpperBound: b.UpperBound, Count: b.Count - e.Count}
	}
	return out, true
}

// Quantile estimates the q-quantile (0 <= q <= 1) of the observations the
// way PromQL's histogram_quantile does for classic histograms: find the
// bucket the rank falls in and interpolate linearly within it, assuming
// the observations are spread evenly between its lower and upper bound.
// The lowest bucket starts at 0 (if its bound is positive); a rank in the
// +Inf bucket answers the highest finite bound. ok is false when there is
// nothing to estimate: no observations, no +Inf bucket, or fewer than two
// buckets.
func (h Histogram) Quantile(q float64) (float64, bool) {
	switch {
	case math.IsNaN(q):
		return math.NaN(), false
	case q < 0:
		return math.Inf(-1), true
	case q > 1:
		return math.Inf(1), true
	}
	buckets := append([]Bucket(nil), h.Buckets...)
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].UpperBound < buckets[j].UpperBound })
	if len(buckets) < 2 || !math.IsInf(buckets[len(buckets)-1].UpperBound, 1) {
		return math.NaN(), false
	}
	// Counts scraped while observations arrive may be slightly
	// non-monotonic; Prometheus flattens them the same way.
	for i := 1; i < len(buckets); i++ {
		if buckets[i].Count < buckets[i-1].Count {
			buckets[i].Count = buckets[i-1].Count
		}
	}
	observations := buckets[len(buckets)-1].Count
	if observations == 0 {
		return math.NaN(), false
	}
	rank := q * observations
	b := sort.Search(len(buckets)-1, func(i int) bool { return buckets[i].Count >= rank })
	switch {
	case b == len(buckets)-1:
		return buckets[len(buckets)-2].UpperBound, true
	case b == 0 && buckets[0].UpperBound <= 0:
		return buckets[0].UpperBound, true
	}
	start, end, count := 0.0, buckets[b].UpperBound, buckets[b].Count
	if b > 0 {
		start = buckets[b-1].UpperBound
		count -= buckets[b-1].Count
		rank -= buckets[b-1].Count
	}
	if count == 0 { // q 0 on an empty first bucket: NaN in PromQL too
		return math.NaN(), false
	}
	return start + (end-start)*(rank/count), true
}
