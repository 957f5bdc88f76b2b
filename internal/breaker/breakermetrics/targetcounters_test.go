package breakermetrics

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// TestTargetCounterVec_exposesWhatACounterVecWould: the same increments on
// a prometheus.CounterVec and on a TargetCounterVec give the same text
// exposition, with and without the extra label.
func TestTargetCounterVec_exposesWhatACounterVecWould(t *testing.T) {
	for _, extra := range []string{"reason", ""} {
		t.Run("extra="+extra, func(t *testing.T) {
			labels := []string{"kind", "configuration", "webhook"}
			if extra != "" {
				labels = append(labels, extra)
			}
			want := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "h."}, labels)
			got := NewTargetCounterVec("x_total", "h.", extra)
			lvs := func(hook, value string) []string {
				l := []string{"Mutating", "inject", hook}
				if extra != "" {
					l = append(l, value)
				}
				return l
			}
			for _, step := range []struct {
				hook, value string
				add         float64
			}{{"a.example.com", "timeout", 0}, {"a.example.com", "tls", 1}, {"b.example.com", "timeout", 2.5}, {"a.example.com", "tls", 1}, {"c.example.com", "refused", 0}} {
				want.WithLabelValues(lvs(step.hook, step.value)...).Add(step.add)
				got.WithLabelValues(lvs(step.hook, step.value)...).Add(step.add)
			}
			exposed, err := testutil.CollectAndFormat(want, expfmt.TypeTextPlain, "x_total")
			require.NoError(t, err)
			series := 3 // a, b and c
			if extra != "" {
				series = 4 // and a's two reasons
			}
			require.Equal(t, series, strings.Count(string(exposed), "example.com"), string(exposed))
			assert.NoError(t, testutil.CollectAndCompare(got, bytes.NewReader(exposed)))
			assert.Equal(t, 2.0, testutil.ToFloat64(got.WithLabelValues(lvs("a.example.com", "tls")...)))
		})
	}
}

// TestTargetGaugeVec_exposesWhatAGaugeVecWould: the same sets on a
// prometheus.GaugeVec and on a TargetGaugeVec give the same text
// exposition (TYPE gauge, values set rather than added), with and without
// the extra label.
func TestTargetGaugeVec_exposesWhatAGaugeVecWould(t *testing.T) {
	for _, extra := range []string{"failing", ""} {
		t.Run("extra="+extra, func(t *testing.T) {
			labels := []string{"kind", "configuration", "webhook"}
			if extra != "" {
				labels = append(labels, extra)
			}
			want := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "x", Help: "h."}, labels)
			got := NewTargetGaugeVec("x", "h.", extra)
			lvs := func(hook, value string) []string {
				l := []string{"Validating", "policy", hook}
				if extra != "" {
					l = append(l, value)
				}
				return l
			}
			for _, step := range []struct {
				hook, value string
				set         float64
			}{{"a.example.com", "probe", 1}, {"a.example.com", "apiserver", 0}, {"b.example.com", "probe", 1}, {"a.example.com", "probe", 0}, {"b.example.com", "probe", 1}} {
				want.WithLabelValues(lvs(step.hook, step.value)...).Set(step.set)
				got.WithLabelValues(lvs(step.hook, step.value)...).Set(step.set)
			}
			exposed, err := testutil.CollectAndFormat(want, expfmt.TypeTextPlain, "x")
			require.NoError(t, err)
			require.Contains(t, string(exposed), "# TYPE x gauge")
			assert.NoError(t, testutil.CollectAndCompare(got, bytes.NewReader(exposed)))
			assert.Equal(t, 1.0, testutil.ToFloat64(got.WithLabelValues(lvs("b.example.com", "probe")...)))
			assert.Equal(t, 0.0, testutil.ToFloat64(got.WithLabelValues(lvs("a.example.com", "probe")...)), "set back to 0, not added")
		})
	}
}

func TestTargetCounterVec_refusesWhatACounterVecRefuses(t *testing.T) {
	v := NewTargetCounterVec("x_total", "h.", "reason")
	assert.Panics(t, func() { v.WithLabelValues("Mutating", "inject", "a.example.com") }, "a missing label value")
	assert.Panics(t, func() { v.WithLabelValues("Mutating", "inject", "a.example.com", "timeout").Add(-1) }, "a counter going down")
}

// BenchmarkInitialize_1000targets reports the heap that Initialize leaves
// live for 1,000 targets, with the breaker's counters as TargetCounterVecs
// and, side by side, as prometheus.CounterVecs:
//
//	go test ./internal/breaker/breakermetrics/ -run '^$' -bench Initialize -benchtime 3x
func BenchmarkInitialize_1000targets(b *testing.B) {
	targets := make([]config.Target, 1000)
	for i := range targets {
		targets[i] = config.Target{Kind: circuit.KindMutating, Configuration: fmt.Sprintf("config-%03d", i/10), Webhook: fmt.Sprintf("hook-%04d.example.com", i)}
	}
	b.Run("TargetCounterVec", func(b *testing.B) {
		for range b.N {
			before := liveHeap()
			m := NewMetrics()
			m.Initialize(targets)
			b.ReportMetric(float64(liveHeap()-before)/1e6, "MB-live")
			runtime.KeepAlive(m)
		}
	})
	b.Run("CounterVec", func(b *testing.B) {
		for range b.N {
			before := liveHeap()
			m := NewMetrics()
			vecs := initializeAsCounterVecs(targets)
			for _, t := range targets {
				m.ProbeDuration.WithLabelValues(string(t.Kind), t.Configuration, t.Webhook)
			}
			b.ReportMetric(float64(liveHeap()-before)/1e6, "MB-live")
			runtime.KeepAlive(m)
			runtime.KeepAlive(vecs)
		}
	})
}

// initializeAsCounterVecs creates the series Initialize creates in the
// seven TargetCounterVecs, in prometheus.CounterVecs.
func initializeAsCounterVecs(targets []config.Target) []*prometheus.CounterVec {
	families := []struct {
		extra  string
		values []string
	}{{"reason", stringsOf(ProbeFailureReasons)}, {"signal", Signals}, {"verdict", stringsOf(Verdicts)}, {"outcome", stringsOf(PathOutcomes)}, {"", nil}, {"", nil}, {"", nil}}
	var vecs []*prometheus.CounterVec
	for i, f := range families {
		labels := []string{"kind", "configuration", "webhook"}
		values := []string{""}
		if f.extra != "" {
			labels, values = append(labels, f.extra), f.values
		}
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: fmt.Sprintf("f%d_total", i), Help: "h."}, labels)
		for _, t := range targets {
			for _, value := range values {
				lvs := []string{string(t.Kind), t.Configuration, t.Webhook}
				if f.extra != "" {
					lvs = append(lvs, value)
				}
				v.WithLabelValues(lvs...)
			}
		}
		vecs = append(vecs, v)
	}
	return vecs
}

func stringsOf[S ~string](values []S) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkGauges_1000targets reports the heap that the breaker's six
// per-target gauge families (open, would open, unknown while open,
// missing, unprobeable, and signals disagree for each failing side), each
// series set once, leave live for 1,000 targets, as TargetGaugeVecs and,
// side by side, as prometheus.GaugeVecs:
//
//	go test ./internal/breaker/breakermetrics/ -run '^$' -bench Gauges -benchtime 3x
func BenchmarkGauges_1000targets(b *testing.B) {
	// setAll sets once every series of the six families, family i made
	// by newVec(i, extra), which returns its setter.
	setAll := func(newVec func(i int, extra string) func(lvs ...string)) {
		var plain []func(lvs ...string)
		for i := range 5 {
			plain = append(plain, newVec(i, ""))
		}
		disagree := newVec(5, "failing")
		for i := range 1000 {
			lvs := []string{"Mutating", fmt.Sprintf("config-%03d", i/10), fmt.Sprintf("hook-%04d.example.com", i)}
			for _, set := range plain {
				set(lvs...)
			}
			for _, side := range []string{"apiserver", "probe"} {
				disagree(append(lvs[:3:3], side)...)
			}
		}
	}
	b.Run("TargetGaugeVec", func(b *testing.B) {
		for range b.N {
			before := liveHeap()
			var vecs []*TargetGaugeVec
			setAll(func(i int, extra string) func(lvs ...string) {
				v := NewTargetGaugeVec(fmt.Sprintf("g%d", i), "h.", extra)
				vecs = append(vecs, v)
				return func(lvs ...string) { v.WithLabelValues(lvs...).Set(0) }
			})
			b.ReportMetric(float64(liveHeap()-before)/1e6, "MB-live")
			runtime.KeepAlive(vecs)
		}
	})
	b.Run("GaugeVec", func(b *testing.B) {
		for range b.N {
			before := liveHeap()
			var vecs []*prometheus.GaugeVec
			setAll(func(i int, extra string) func(lvs ...string) {
				labels := []string{"kind", "configuration", "webhook"}
				if extra != "" {
					labels = append(labels, extra)
				}
				v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: fmt.Sprintf("g%d", i), Help: "h."}, labels)
				vecs = append(vecs, v)
				return func(lvs ...string) { v.WithLabelValues(lvs...).Set(0) }
			})
			b.ReportMetric(float64(liveHeap()-before)/1e6, "MB-live")
			runtime.KeepAlive(vecs)
		}
	})
}
