package apimetrics

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// latency is a histogram with the apiserver's bucket bounds for webhook
// calls, counting fast calls at 5 ms and slow ones at 2.5 s.
func latency(fast, slow float64) Histogram {
	bounds := []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 25, math.Inf(1)}
	h := Histogram{Count: fast + slow}
	for _, b := range bounds {
		c := fast
		if b >= 2.5 {
			c += slow
		}
		h.Buckets = append(h.Buckets, Bucket{UpperBound: b, Count: c})
	}
	return h
}

func TestTracker_trafficIsTheCallsBetweenTwoScrapes(t *testing.T) {
	within := Thresholds{MinRequests: 5, FailureRatio: 0.5, FastWithin: time.Second}
	start := time.Unix(1000, 0)
	tr := &Tracker{MaxWindow: 10 * time.Second}
	sample := func(calls, errs, failOpen, fast, slow float64) Sample {
		return Sample{Instance: 1,
			Webhooks: map[Webhook]Counters{mut: {Calls: calls, CallErrors: errs, FailOpen: failOpen, Series: 3}},
			Latency:  map[Webhook]Histogram{mut: latency(fast, slow)}}
	}
	observe := func(at time.Duration, s Sample) Traffic {
		return tr.Observe(s, start.Add(at), map[Webhook]Thresholds{mut: within})[mut].Traffic
	}

	first := observe(0, sample(10, 0, 0, 10, 0))
	assert.Zero(t, first.Window, "the first scrape of an instance has nothing to compare with")
	assert.False(t, first.Healthy())

	got := observe(time.Second, sample(12, 0, 0, 12, 0))
	assert.Equal(t, Traffic{Calls: 2, Window: time.Second}, got)
	assert.True(t, got.Healthy(), "two fast calls that did not fail, fewer than minRequests: still worth a probe")

	got = observe(2*time.Second, sample(12, 0, 0, 12, 0))
	assert.False(t, got.Healthy(), "no call is no evidence")

	got = observe(3*time.Second, sample(15, 1, 0, 15, 0))
	assert.Equal(t, 1.0, got.Failed)
	assert.False(t, got.Healthy(), "one failed call in three")

	got = observe(4*time.Second, sample(17, 1, 1, 17, 0))
	assert.False(t, got.Healthy(), "a call that failed open under Ignore failed")

	got = observe(5*time.Second, sample(20, 1, 1, 19, 1))
	assert.Equal(t, Traffic{Calls: 3, Slow: 1, Window: time.Second}, got)
	assert.False(t, got.Healthy(), "a call slower than the probe's timeout would have failed the probe")

	s := sample(22, 1, 1, 21, 1)
	s.Latency = nil
	got = observe(6*time.Second, s)
	assert.Equal(t, 2.0, got.Slow, "without the histogram no call is known to be fast")

	got = observe(7*time.Second, sample(23, 1, 1, 22, 1))
	assert.Equal(t, 1.0, got.Slow, "a histogram missing from the previous scrape cannot be subtracted")

	got = observe(8*time.Second, sample(24, 1, 1, 23, 1))
	assert.True(t, got.Healthy())
}

func TestTracker_trafficWithoutFastWithinCountsNoSlowCalls(t *testing.T) {
	tr := &Tracker{MaxWindow: 10 * time.Second}
	at := time.Unix(1000, 0)
	for i, calls := range []float64{1, 4} {
		r := tr.Observe(Sample{Instance: 1, Webhooks: map[Webhook]Counters{mut: {Calls: calls, Series: 1}}}, at.Add(time.Duration(i)*time.Second), map[Webhook]Thresholds{mut: th})[mut]
		if i == 1 {
			assert.Equal(t, Traffic{Calls: 3, Window: time.Second}, r.Traffic)
		}
	}
}

func TestTracker_trafficAfterAResetIsUnknown(t *testing.T) {
	tr := &Tracker{MaxWindow: 10 * time.Second}
	at := time.Unix(1000, 0)
	want := map[Webhook]Thresholds{mut: th}
	_ = tr.Observe(Sample{Instance: 1, Webhooks: map[Webhook]Counters{mut: {Calls: 10, Series: 1}}}, at, want)[mut]
	r := tr.Observe(Sample{Instance: 1, Webhooks: map[Webhook]Counters{mut: {Calls: 3, Series: 1}}}, at.Add(time.Second), want)[mut]
	assert.Zero(t, r.Traffic.Window)
	assert.False(t, r.Traffic.Healthy())
}
