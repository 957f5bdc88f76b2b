package apimetrics

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// apiserverBounds are kube-apiserver's buckets for
// apiserver_admission_webhook_admission_duration_seconds.
var apiserverBounds = []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 25, math.Inf(1)}

// hist builds a histogram on apiserverBounds from cumulative counts.
func hist(counts ...float64) Histogram {
	h := Histogram{}
	for i, c := range counts {
		h.Buckets = append(h.Buckets, Bucket{UpperBound: apiserverBounds[i], Count: c})
	}
	h.Count = counts[len(counts)-1]
	return h
}

func TestHistogram_Quantile(t *testing.T) {
	inf := math.Inf(1)
	tests := map[string]struct {
		h      Histogram
		q      float64
		want   float64
		wantOK bool
	}{
		"every call in (0.5, 1]: p99 interpolates to 99% of the way up": {
			h: hist(0, 0, 0, 0, 10, 10, 10, 10, 10), q: 0.99, want: 0.995, wantOK: true},
		"rank in a middle bucket interpolates from its lower bound": {
			h: hist(0, 50, 90, 100, 100, 100, 100, 100, 100), q: 0.99, want: 0.1 + 0.4*0.9, wantOK: true},
		"rank in the lowest bucket starts at 0": {
			h: hist(10, 10, 10, 10, 10, 10, 10, 10, 10), q: 0.5, want: 0.0025, wantOK: true},
		"p50 exactly at a bucket's cumulative count is its upper bound": {
			h: hist(0, 0, 5, 10, 10, 10, 10, 10, 10), q: 0.5, want: 0.1, wantOK: true},
		"rank in +Inf answers the highest finite bound": {
			h: hist(0, 0, 0, 0, 0, 0, 0, 1, 100), q: 0.99, want: 25, wantOK: true},
		"unsorted buckets are sorted first": {
			h: Histogram{Buckets: []Bucket{{inf, 10}, {1, 10}, {0.5, 0}}}, q: 0.99, want: 0.995, wantOK: true},
		"non-monotonic counts are flattened": {
			h: Histogram{Buckets: []Bucket{{0.1, 5}, {0.5, 4}, {1, 10}, {inf, 10}}}, q: 0.5, want: 0.1, wantOK: true},
		"no observations is no estimate":    {h: hist(0, 0, 0, 0, 0, 0, 0, 0, 0), q: 0.99, want: math.NaN()},
		"no +Inf bucket is no estimate":     {h: Histogram{Buckets: []Bucket{{0.5, 1}, {1, 2}}}, q: 0.99, want: math.NaN()},
		"a single bucket is no estimate":    {h: Histogram{Buckets: []Bucket{{inf, 3}}}, q: 0.99, want: math.NaN()},
		"no buckets is no estimate":         {h: Histogram{}, q: 0.99, want: math.NaN()},
		"q above 1 is +Inf, as in PromQL":   {h: hist(0, 0, 0, 0, 10, 10, 10, 10, 10), q: 1.5, want: inf, wantOK: true},
		"q below 0 is -Inf, as in PromQL":   {h: hist(0, 0, 0, 0, 10, 10, 10, 10, 10), q: -1, want: math.Inf(-1), wantOK: true},
		"a non-positive lowest bound is it": {h: Histogram{Buckets: []Bucket{{0, 5}, {1, 10}, {inf, 10}}}, q: 0.2, want: 0, wantOK: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := tc.h.Quantile(tc.q)
			assert.Equal(t, tc.wantOK, ok)
			if math.IsNaN(tc.want) {
				assert.True(t, math.IsNaN(got), "got %v", got)
				return
			}
			// hack/promcheck checks that these cases also answer exactly
			// what PromQL's histogram_quantile answers.
			assert.InDelta(t, tc.want, got, 1e-9)
		})
	}
}

func TestHistogram_Sub(t *testing.T) {
	later := hist(1, 2, 3, 4, 14, 14, 14, 14, 14)
	earlier := hist(1, 2, 3, 4, 4, 4, 4, 4, 4)
	d, ok := later.Sub(earlier)
	require.True(t, ok)
	assert.Equal(t, hist(0, 0, 0, 0, 10, 10, 10, 10, 10), d)
	p99, _ := d.Quantile(0.99)
	assert.InDelta(t, 0.995, p99, 1e-9, "the window's calls only")

	d, ok = later.Sub(Histogram{})
	assert.True(t, ok, "a webhook first called within the window")
	assert.Equal(t, later, d)

	_, ok = earlier.Sub(later)
	assert.False(t, ok, "a bucket that went down is a reset")
	_, ok = later.Sub(Histogram{Buckets: []Bucket{{1, 1}, {math.Inf(1), 1}}, Count: 1})
	assert.False(t, ok, "other bounds cannot be subtracted")
}

func TestRead_latencySumsTheSeriesOfEachWantedWebhook(t *testing.T) {
	text := exposition(1, 10, 0, 0, 0) + `# HELP apiserver_admission_webhook_admission_duration_seconds [STABLE] Admission webhook latency histogram in seconds.
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
` + series("slow.example.com", "admit", "false", 0, 0, 0, 1, 4) + series("slow.example.com", "admit", "true", 0, 0, 0, 0, 6) +
		series("policy.example.com", "validating", "false", 10, 10, 10, 10, 10) + series("other.example.com", "admit", "false", 99, 99, 99, 99, 99)
	s, err := Read(strings.NewReader(text), map[Webhook]bool{mut: true, val: true}, ParseOptions{Latency: true})
	require.NoError(t, err)
	assert.Equal(t, Histogram{Count: 10, Sum: 2, Buckets: []Bucket{{0.005, 0}, {0.025, 0}, {0.1, 0}, {0.5, 1}, {1, 10}, {math.Inf(1), 10}}}, s.Latency[mut],
		"summed over rejected (and operation) by bound")
	assert.Equal(t, float64(10), s.Latency[val].Count, "validating webhooks are type=validating")
	assert.Len(t, s.Latency, 2, "webhooks not asked for are dropped")

	counters, err := Parse(strings.NewReader(text), map[Webhook]bool{mut: true, val: true})
	require.NoError(t, err)
	assert.Nil(t, counters.Latency, "Parse (the breaker's) does not read the histogram")
	assert.Equal(t, counters.Webhooks, s.Webhooks, "the histogram's series are not counted in the counters' Series")
}

func TestRead_latencyOfARealApiserver(t *testing.T) {
	data := realMetrics(t)
	want := realWant(t, data)
	s, err := Read(strings.NewReader(string(data)), want, ParseOptions{Latency: true})
	require.NoError(t, err)
	for wh := range want {
		h := s.Latency[wh]
		require.NotEmpty(t, h.Buckets, "%v", wh)
		assert.Equal(t, s.Webhooks[wh].Calls, h.Count, "%v: every call is observed once in the histogram", wh)
		_, ok := h.Quantile(0.99)
		assert.True(t, ok, "%v", wh)
	}
}

func TestRead_tooManyBucketBoundsIsAnError(t *testing.T) {
	var b strings.Builder
	b.WriteString("# TYPE apiserver_admission_webhook_admission_duration_seconds histogram\n")
	for i := range MaxBuckets + 1 {
		b.WriteString(`apiserver_admission_webhook_admission_duration_seconds_bucket{name="slow.example.com",operation="CREATE",rejected="false",type="admit",le="` + fmt.Sprintf("1.%03d", i) + `"} 1` + "\n")
	}
	b.WriteString(`apiserver_admission_webhook_admission_duration_seconds_bucket{name="slow.example.com",operation="CREATE",rejected="false",type="admit",le="+Inf"} 1` + "\n")
	b.WriteString(`apiserver_admission_webhook_admission_duration_seconds_sum{name="slow.example.com",operation="CREATE",rejected="false",type="admit"} 1` + "\n")
	b.WriteString(`apiserver_admission_webhook_admission_duration_seconds_count{name="slow.example.com",operation="CREATE",rejected="false",type="admit"} 1` + "\n")
	_, err := Read(strings.NewReader(b.String()), map[Webhook]bool{mut: true}, ParseOptions{Latency: true})
	require.ErrorContains(t, err, "bucket bounds")
}

// series renders one histogram series with cumulative counts on the
// bounds 0.005, 0.025, 0.1, 0.5, 1 (and +Inf equal to the last); its
// sum is 0.2 per observation.
func series(name, typ, rejected string, c ...float64) string {
	var b strings.Builder
	labels := `name="` + name + `",operation="CREATE",rejected="` + rejected + `",type="` + typ + `"`
	for i, le := range []string{"0.005", "0.025", "0.1", "0.5", "1", "+Inf"} {
		v := c[min(i, len(c)-1)]
		b.WriteString("apiserver_admission_webhook_admission_duration_seconds_bucket{" + labels + `,le="` + le + `"} ` + fmt.Sprint(v) + "\n")
	}
	n := c[len(c)-1]
	b.WriteString("apiserver_admission_webhook_admission_duration_seconds_sum{" + labels + "} " + fmt.Sprint(n*0.2) + "\n")
	b.WriteString("apiserver_admission_webhook_admission_duration_seconds_count{" + labels + "} " + fmt.Sprint(n) + "\n")
	return b.String()
}
