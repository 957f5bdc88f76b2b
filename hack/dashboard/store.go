package main

import (
	"context"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// store keeps the scraped samples in memory and serves them to the PromQL
// engine as a storage.Queryable. (Prometheus's tsdb would do too, but it
// brings in every cloud SDK its service discovery needs.)
type store struct {
	mu     sync.Mutex
	series map[string]*memSeries
	// last holds, per target, the series of its previous scrape, so that
	// series that vanish get a staleness marker as Prometheus writes one.
	last map[string]map[string]labels.Labels
}

type memSeries struct {
	labels  labels.Labels
	samples []chunks.Sample
}

func newStore() *store {
	return &store{series: map[string]*memSeries{}, last: map[string]map[string]labels.Labels{}}
}

func (s *store) append(l labels.Labels, t int64, v float64) {
	key := l.String()
	ms := s.series[key]
	if ms == nil {
		ms = &memSeries{labels: l}
		s.series[key] = ms
	}
	if n := len(ms.samples); n > 0 && ms.samples[n-1].T() >= t {
		return // out of order, as Prometheus would reject it
	}
	ms.samples = append(ms.samples, floatSample{t: t, f: v})
}

// appendScrape parses one text-format scrape of target and appends its
// samples at t (milliseconds) with the target's labels added; a failed
// scrape (body nil) marks every series of the target stale.
func (s *store) appendScrape(target labels.Labels, t int64, body io.Reader) error {
	var families map[string]*dto.MetricFamily
	if body != nil {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		var err error
		if families, err = parser.TextToMetricFamilies(body); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := map[string]labels.Labels{}
	add := func(l labels.Labels, v float64) {
		now[l.String()] = l
		s.append(l, t, v)
	}
	for name, mf := range families {
		for _, m := range mf.Metric {
			appendMetric(add, target, name, mf.GetType(), m)
		}
	}
	key := target.String()
	for k, l := range s.last[key] {
		if _, ok := now[k]; !ok {
			s.append(l, t, math.Float64frombits(value.StaleNaN))
		}
	}
	s.last[key] = now
	return nil
}

// Querier implements storage.Queryable.
func (s *store) Querier(_, _ int64) (storage.Querier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := &querier{}
	for _, ms := range s.series {
		q.series = append(q.series, storage.NewListSeries(ms.labels, slices.Clone(ms.samples)))
	}
	sort.Slice(q.series, func(i, j int) bool { return labels.Compare(q.series[i].Labels(), q.series[j].Labels()) < 0 })
	return q, nil
}

// querier is a snapshot of the store, its series sorted by labels.
type querier struct{ series []storage.Series }

func (q *querier) Select(_ context.Context, _ bool, _ *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
	var out []storage.Series
	for _, sr := range q.series {
		if matchAll(sr.Labels(), matchers) {
			out = append(out, sr)
		}
	}
	return &seriesSet{series: out, i: -1}
}

func (q *querier) LabelValues(_ context.Context, name string, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	for _, sr := range q.series {
		if v := sr.Labels().Get(name); v != "" && matchAll(sr.Labels(), matchers) {
			seen[v] = true
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil, nil
}

func (q *querier) LabelNames(_ context.Context, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	for _, sr := range q.series {
		if matchAll(sr.Labels(), matchers) {
			sr.Labels().Range(func(l labels.Label) { seen[l.Name] = true })
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil, nil
}

func (q *querier) Close() error { return nil }

func matchAll(l labels.Labels, matchers []*labels.Matcher) bool {
	for _, m := range matchers {
		if !m.Matches(l.Get(m.Name)) {
			return false
		}
	}
	return true
}

type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.i] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// floatSample is a float sample, as chunks.Sample.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }

// appendMetric appends the samples of one metric of a family as
// Prometheus stores a classic (text-format) scrape: histograms as _bucket,
// _sum and _count series.
func appendMetric(add func(labels.Labels, float64), target labels.Labels, name string, typ dto.MetricType, m *dto.Metric) {
	series := func(suffix string, extra ...string) labels.Labels {
		b := labels.NewBuilder(target)
		for _, lp := range m.Label {
			b.Set(lp.GetName(), lp.GetValue())
		}
		for i := 0; i+1 < len(extra); i += 2 {
			b.Set(extra[i], extra[i+1])
		}
		b.Set(model.MetricNameLabel, name+suffix)
		return b.Labels()
	}
	switch typ {
	case dto.MetricType_COUNTER:
		add(series(""), m.GetCounter().GetValue())
	case dto.MetricType_GAUGE:
		add(series(""), m.GetGauge().GetValue())
	case dto.MetricType_UNTYPED:
		add(series(""), m.GetUntyped().GetValue())
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		inf := false
		for _, b := range h.Bucket {
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
			add(series("_bucket", "le", formatLe(b.GetUpperBound())), float64(b.GetCumulativeCount()))
		}
		if !inf {
			add(series("_bucket", "le", "+Inf"), float64(h.GetSampleCount()))
		}
		add(series("_sum"), h.GetSampleSum())
		add(series("_count"), float64(h.GetSampleCount()))
	case dto.MetricType_SUMMARY:
		sm := m.GetSummary()
		for _, q := range sm.Quantile {
			add(series("", "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)), q.GetValue())
		}
		add(series("_sum"), sm.GetSampleSum())
		add(series("_count"), float64(sm.GetSampleCount()))
	}
}

// formatLe writes a bucket bound as Prometheus's text format does.
func formatLe(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
