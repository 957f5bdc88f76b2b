package promcheck_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/prometheus/promql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
)

// apiserverBounds are kube-apiserver's buckets for
// apiserver_admission_webhook_admission_duration_seconds.
var apiserverBounds = []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 25, math.Inf(1)}

// hist builds a histogram on apiserverBounds from cumulative counts.
func hist(counts ...float64) apimetrics.Histogram {
	h := apimetrics.Histogram{}
	for i, c := range counts {
		h.Buckets = append(h.Buckets, apimetrics.Bucket{UpperBound: apiserverBounds[i], Count: c})
	}
	h.Count = counts[len(counts)-1]
	return h
}

// buckets builds a histogram from (upper bound, cumulative count) pairs.
func buckets(pairs ...[2]float64) apimetrics.Histogram {
	h := apimetrics.Histogram{}
	for _, p := range pairs {
		h.Buckets = append(h.Buckets, apimetrics.Bucket{UpperBound: p[0], Count: p[1]})
	}
	return h
}

// promQuantile is PromQL's own histogram_quantile for classic buckets.
func promQuantile(q float64, h apimetrics.Histogram) float64 {
	var bs promql.Buckets
	for _, b := range h.Buckets {
		bs = append(bs, promql.Bucket{UpperBound: b.UpperBound, Count: b.Count})
	}
	v, _, _, _, _, _ := promql.BucketQuantile(q, bs)
	return v
}

// TestHistogram_QuantileAgreesWithPromQL_unitCases: on the histograms of
// internal/apimetrics's TestHistogram_Quantile that have an estimate (that
// test checks the values, and the cases without one), Quantile answers
// exactly what PromQL's histogram_quantile answers. (PromQL never calls
// BucketQuantile without buckets; it panics.)
func TestHistogram_QuantileAgreesWithPromQL_unitCases(t *testing.T) {
	inf := math.Inf(1)
	tests := map[string]struct {
		h apimetrics.Histogram
		q float64
	}{
		"every call in (0.5, 1]":                     {h: hist(0, 0, 0, 0, 10, 10, 10, 10, 10), q: 0.99},
		"rank in a middle bucket":                    {h: hist(0, 50, 90, 100, 100, 100, 100, 100, 100), q: 0.99},
		"rank in the lowest bucket":                  {h: hist(10, 10, 10, 10, 10, 10, 10, 10, 10), q: 0.5},
		"p50 exactly at a bucket's cumulative count": {h: hist(0, 0, 5, 10, 10, 10, 10, 10, 10), q: 0.5},
		"rank in +Inf":                               {h: hist(0, 0, 0, 0, 0, 0, 0, 1, 100), q: 0.99},
		"unsorted buckets":                           {h: buckets([2]float64{inf, 10}, [2]float64{1, 10}, [2]float64{0.5, 0}), q: 0.99},
		"non-monotonic counts":                       {h: buckets([2]float64{0.1, 5}, [2]float64{0.5, 4}, [2]float64{1, 10}, [2]float64{inf, 10}), q: 0.5},
		"q above 1":                                  {h: hist(0, 0, 0, 0, 10, 10, 10, 10, 10), q: 1.5},
		"q below 0":                                  {h: hist(0, 0, 0, 0, 10, 10, 10, 10, 10), q: -1},
		"a non-positive lowest bound":                {h: buckets([2]float64{0, 5}, [2]float64{1, 10}, [2]float64{inf, 10}), q: 0.2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := tc.h.Quantile(tc.q)
			assert.True(t, ok)
			assert.Equal(t, promQuantile(tc.q, tc.h), got, "the same as PromQL's histogram_quantile")
		})
	}
}

// TestHistogram_QuantileAgreesWithPromQL: on 2,000 random histograms on
// kube-apiserver's bounds, Quantile answers what PromQL answers.
func TestHistogram_QuantileAgreesWithPromQL(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		counts := make([]float64, len(apiserverBounds))
		total := 0.0
		for j := range counts {
			total += float64(r.IntN(4) * r.IntN(20))
			counts[j] = total
		}
		h := hist(counts...)
		q := []float64{0, 0.5, 0.9, 0.99, 1, r.Float64()}[i%6]
		got, ok := h.Quantile(q)
		want := promQuantile(q, h)
		if math.IsNaN(want) {
			require.False(t, ok, "%v q=%v", counts, q)
			continue
		}
		require.True(t, ok, "%v q=%v", counts, q)
		require.InDelta(t, want, got, 1e-12, "%v q=%v", counts, q)
	}
}
