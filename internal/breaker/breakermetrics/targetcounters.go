package breakermetrics

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// TargetCounterVec is a counter family whose series are one per target
// (kind, configuration, webhook), or one per target and value of one more
// label. It exposes what a prometheus.CounterVec with those labels would,
// and keeps each series as one number. A CounterVec keeps each series'
// labels as protobuf pairs and a created timestamp, about 700 bytes: with
// the breaker's nineteen counter series a target, all created at 0 by
// Initialize, the live heap Initialize leaves at 1,000 targets was 15.4 MB,
// and is 3.8 MB with these (BenchmarkInitialize_1000targets measures both).
// Collect builds the label pairs at each scrape instead, and drops them with
// the scrape.
type TargetCounterVec struct {
	desc      *prometheus.Desc
	labels    int // 3, or 4 with the extra label
	valueType prometheus.ValueType

	mu   sync.RWMutex // guards rows and every row's cells
	rows map[targetKey]*counterRow
}

type targetKey struct{ kind, configuration, webhook string }

// counterRow holds one target's series, one per value of the extra label
// (one with the value "" when there is none). Rows are few-valued
// (at most the reasons of a probe failure), so a slice is searched.
type counterRow struct {
	vec   *TargetCounterVec
	key   targetKey
	cells []*TargetCounter
}

// TargetCounter is one series of a TargetCounterVec. It is a
// prometheus.Collector of that one series, so that
// testutil.ToFloat64 reads it as it reads a CounterVec's child.
type TargetCounter struct {
	row   *counterRow
	extra string
	bits  atomic.Uint64 // math.Float64bits of the value
}

// NewTargetCounterVec returns a family named name with the target's labels
// and, if extra is not empty, one more label named extra.
func NewTargetCounterVec(name, help, extra string) *TargetCounterVec {
	labels := []string{"kind", "configuration", "webhook"}
	if extra != "" {
		labels = append(labels, extra)
	}
	return &TargetCounterVec{
		desc:      prometheus.NewDesc(name, help, labels, nil),
		labels:    len(labels),
		valueType: prometheus.CounterValue,
		rows:      map[targetKey]*counterRow{},
	}
}

// WithLabelValues returns the series of the label values lvs (kind,
// configuration, webhook and, if the family has it, the extra label),
// creating it at 0. Like a CounterVec's, it panics on a wrong number of
// values: that is a programming error.
func (v *TargetCounterVec) WithLabelValues(lvs ...string) *TargetCounter {
	if len(lvs) != v.labels {
		panic(fmt.Sprintf("%s: %d label values, want %d", v.desc, len(lvs), v.labels))
	}
	key := targetKey{lvs[0], lvs[1], lvs[2]}
	extra := ""
	if v.labels == 4 {
		extra = lvs[3]
	}
	v.mu.RLock()
	c := v.find(key, extra)
	v.mu.RUnlock()
	if c != nil {
		return c
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c := v.find(key, extra); c != nil {
		return c
	}
	r := v.rows[key]
	if r == nil {
		r = &counterRow{vec: v, key: key}
		v.rows[key] = r
	}
	c = &TargetCounter{row: r, extra: extra}
	r.cells = append(r.cells, c)
	return c
}

// find returns the series of key and extra, or nil; v.mu is held.
func (v *TargetCounterVec) find(key targetKey, extra string) *TargetCounter {
	if r := v.rows[key]; r != nil {
		for _, c := range r.cells {
			if c.extra == extra {
				return c
			}
		}
	}
	return nil
}

// Describe sends the family's one Desc.
func (v *TargetCounterVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect sends every series.
func (v *TargetCounterVec) Collect(ch chan<- prometheus.Metric) {
	v.mu.RLock()
	var all []*TargetCounter
	for _, r := range v.rows {
		all = append(all, r.cells...)
	}
	v.mu.RUnlock()
	for _, c := range all {
		c.Collect(ch)
	}
}

// Inc adds 1.
func (c *TargetCounter) Inc() { c.Add(1) }

// Add adds delta, which must not be negative (a counter never goes down;
// like a prometheus.Counter, it panics).
func (c *TargetCounter) Add(delta float64) {
	if delta < 0 {
		panic(fmt.Sprintf("%s: counter cannot decrease in value", c.row.vec.desc))
	}
	for {
		old := c.bits.Load()
		if c.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+delta)) {
			return
		}
	}
}

// Describe sends the family's Desc.
func (c *TargetCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.row.vec.desc }

// Collect sends this one series.
func (c *TargetCounter) Collect(ch chan<- prometheus.Metric) {
	r := c.row
	lvs := []string{r.key.kind, r.key.configuration, r.key.webhook}
	if r.vec.labels == 4 {
		lvs = append(lvs, c.extra)
	}
	ch <- prometheus.MustNewConstMetric(r.vec.desc, r.vec.valueType, math.Float64frombits(c.bits.Load()), lvs...)
}

// TargetGaugeVec is a gauge family with one series per target (or per
// target and value of one more label), kept as TargetCounterVec keeps its
// counters: one number a series. The breaker's six gauge series a target
// (circuit open, would open, unknown while open, missing, unprobeable,
// signals disagree for each side) leave 1.6 MB of live heap at 1,000
// targets, and 4.2 MB as GaugeVecs (BenchmarkGauges_1000targets).
type TargetGaugeVec struct{ vec *TargetCounterVec }

// TargetGauge is one series of a TargetGaugeVec, and a
// prometheus.Collector of that one series.
type TargetGauge TargetCounter

// NewTargetGaugeVec returns a gauge family named name with the target's
// labels and, if extra is not empty, one more label named extra.
func NewTargetGaugeVec(name, help, extra string) *TargetGaugeVec {
	v := NewTargetCounterVec(name, help, extra)
	v.valueType = prometheus.GaugeValue
	return &TargetGaugeVec{vec: v}
}

// WithLabelValues returns the series of the label values lvs, creating it
// at 0; it panics on a wrong number of values, as a GaugeVec's does.
func (g *TargetGaugeVec) WithLabelValues(lvs ...string) *TargetGauge {
	return (*TargetGauge)(g.vec.WithLabelValues(lvs...))
}

// Describe sends the family's one Desc.
func (g *TargetGaugeVec) Describe(ch chan<- *prometheus.Desc) { g.vec.Describe(ch) }

// Collect sends every series.
func (g *TargetGaugeVec) Collect(ch chan<- prometheus.Metric) { g.vec.Collect(ch) }

// Set sets the value.
func (g *TargetGauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Describe sends the family's Desc.
func (g *TargetGauge) Describe(ch chan<- *prometheus.Desc) { (*TargetCounter)(g).Describe(ch) }

// Collect sends this one series.
func (g *TargetGauge) Collect(ch chan<- prometheus.Metric) { (*TargetCounter)(g).Collect(ch) }
