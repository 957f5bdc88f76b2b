package apimetrics

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The families read from kube-apiserver's /metrics (k8s.io/apiserver
// pkg/admission/metrics). Every webhook call the apiserver completes is
// counted in RequestTotal. A call that failed (timeout, refused, TLS) is
// counted in RejectionCount with error_type calling_webhook_error when the
// failurePolicy is Fail, and in FailOpenCount when it is Ignore. A call
// skipped by a matchCondition is counted in MatchConditionExclusions only.
const (
	RequestTotal             = "apiserver_admission_webhook_request_total"
	RejectionCount           = "apiserver_admission_webhook_rejection_count"
	FailOpenCount            = "apiserver_admission_webhook_fail_open_count"
	MatchConditionExclusions = "apiserver_admission_match_condition_exclusions_total"
	// MutatingPolicyChecks counts every application of a
	// MutatingAdmissionPolicy, by policy: for a marking policy, every
	// object it marked.
	MutatingPolicyChecks = "apiserver_mutating_admission_policy_check_total"
	// ProcessStartTime tells apiserver instances apart: behind a Service,
	// each scrape may reach another one, with counters of its own.
	ProcessStartTime = "process_start_time_seconds"

	// CallingWebhookError is RejectionCount's error_type for a call that
	// failed, as opposed to a webhook that answered "no".
	CallingWebhookError = "calling_webhook_error"
)

// AdmissionDuration is the apiserver's histogram of webhook call
// latencies, by webhook name, type, operation and rejected. It is read
// only when asked for (ParseOptions.Latency): the breaker does not need it.
const AdmissionDuration = "apiserver_admission_webhook_admission_duration_seconds"

var families = map[string]bool{RequestTotal: true, RejectionCount: true, FailOpenCount: true, MatchConditionExclusions: true, MutatingPolicyChecks: true, ProcessStartTime: true}

// latencyFamilies are families plus the histogram's lines: its HELP and
// TYPE comments name the family, its samples carry a suffix.
var latencyFamilies = func() map[string]bool {
	m := map[string]bool{AdmissionDuration: true, AdmissionDuration + "_bucket": true, AdmissionDuration + "_sum": true, AdmissionDuration + "_count": true}
	for f := range families {
		m[f] = true
	}
	return m
}()

// Type is the admission type of a webhook as the apiserver labels it.
type Type string

const (
	// Mutating webhooks are labelled type="admit" everywhere.
	Mutating Type = "admit"
	// Validating webhooks are labelled type="validating" on the request,
	// rejection and fail-open counters...
	Validating Type = "validating"
	// ...and type="validate" on the match-condition counters.
	validatingExclusion = "validate"
)

// Webhook names a webhook in the apiserver's metrics: its name (the
// metrics carry no configuration name) and its type.
type Webhook struct {
	Name string
	Type Type
	// MarkingPolicy, when set, is the MutatingAdmissionPolicy that marks
	// what is admitted without the webhook; its applications are counted
	// in Counters.Marked.
	MarkingPolicy string
}

// Counters are one webhook's counters in one scrape, summed over the
// other labels (operation, code, ...).
type Counters struct {
	// Calls is every call made (RequestTotal).
	Calls float64
	// CallErrors are calls that failed under failurePolicy Fail.
	CallErrors float64
	// FailOpen are calls that failed under failurePolicy Ignore; the
	// request was admitted without the webhook.
	FailOpen float64
	// Excluded are requests a matchCondition kept from the webhook.
	Excluded float64
	// Marked are the applications of the webhook's marking policy.
	Marked float64
	// Series is how many series were summed; fewer than before means the
	// apiserver's counters were reset.
	Series int
}

// Sample is what one scrape says about the webhooks asked for.
type Sample struct {
	// Instance is the apiserver's process start time, or 0 when its
	// metrics do not say.
	Instance float64
	// Webhooks holds the counters of every webhook asked for that the
	// apiserver has counted anything for.
	Webhooks map[Webhook]Counters
	// Bytes is the size of the whole response read.
	Bytes int64
	// Latency holds the call latency histogram of every webhook asked for
	// that the apiserver observed calls of, summed over operation and
	// rejected. Only with ParseOptions.Latency.
	Latency map[Webhook]Histogram
}

// ParseOptions choose what Read parses beyond the counters.
type ParseOptions struct {
	// Latency also reads AdmissionDuration into Sample.Latency.
	Latency bool
}

// Limits on a scrape. A real kube-apiserver v1.37 with a few webhooks
// serves a few MiB; the families kept are a small part of it.
const (
	// MaxBytes is the most read from one response.
	MaxBytes = 64 << 20
	// maxLine is the longest line accepted.
	maxLine = 64 << 10
	// MaxBuckets is the most distinct bucket bounds one webhook's
	// histogram may have (the apiserver uses 9); more is an error.
	MaxBuckets = 64
)

// Parse reads a Prometheus text exposition and returns the counters of
// the webhooks in want. Lines of other families are dropped before the
// Prometheus text parser sees them, so memory grows with the webhook
// families only, not with the whole response.
func Parse(r io.Reader, want map[Webhook]bool) (Sample, error) {
	return Read(r, want, ParseOptions{})
}

// Read is Parse with options: with opts.Latency it also reads the
// webhooks' latency histograms, within the same limits.
func Read(r io.Reader, want map[Webhook]bool, opts ParseOptions) (Sample, error) {
	keep := families
	if opts.Latency {
		keep = latencyFamilies
	}
	counted := &countingReader{r: io.LimitReader(r, MaxBytes+1)}
	kept, err := filter(counted, keep)
	if counted.n > MaxBytes {
		return Sample{Bytes: counted.n}, fmt.Errorf("apiserver metrics larger than %d bytes", MaxBytes)
	}
	if err != nil {
		return Sample{Bytes: counted.n}, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(kept))
	if err != nil {
		return Sample{Bytes: counted.n}, fmt.Errorf("parsing apiserver metrics: %w", err)
	}
	s := Sample{Webhooks: map[Webhook]Counters{}, Bytes: counted.n}
	if mf := mfs[ProcessStartTime]; mf != nil && len(mf.Metric) > 0 {
		s.Instance = value(mf.Metric[0])
	}
	byName, byPolicy := map[[2]string][]Webhook{}, map[string][]Webhook{}
	for wh := range want {
		byName[[2]string{wh.Name, string(wh.Type)}] = append(byName[[2]string{wh.Name, string(wh.Type)}], wh)
		if wh.MarkingPolicy != "" {
			byPolicy[wh.MarkingPolicy] = append(byPolicy[wh.MarkingPolicy], wh)
		}
	}
	add := func(family string, f func(c *Counters, v float64, labels map[string]string)) {
		for _, m := range mfs[family].GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			var whs []Webhook
			if family == MutatingPolicyChecks {
				whs = byPolicy[labels["policy"]]
			} else {
				typ := Type(labels["type"])
				if typ == validatingExclusion {
					typ = Validating
				}
				whs = byName[[2]string{labels["name"], string(typ)}]
			}
			for _, wh := range whs {
				c := s.Webhooks[wh]
				f(&c, value(m), labels)
				c.Series++
				s.Webhooks[wh] = c
			}
		}
	}
	add(RequestTotal, func(c *Counters, v float64, _ map[string]string) { c.Calls += v })
	add(RejectionCount, func(c *Counters, v float64, l map[string]string) {
		if l["error_type"] == CallingWebhookError {
			c.CallErrors += v
		}
	})
	add(FailOpenCount, func(c *Counters, v float64, _ map[string]string) { c.FailOpen += v })
	add(MatchConditionExclusions, func(c *Counters, v float64, l map[string]string) {
		if l["kind"] == "webhook" {
			c.Excluded += v
		}
	})
	add(MutatingPolicyChecks, func(c *Counters, v float64, _ map[string]string) { c.Marked += v })
	if opts.Latency {
		lat, err := latencies(mfs[AdmissionDuration], byName)
		if err != nil {
			return Sample{Bytes: counted.n}, err
		}
		s.Latency = lat
	}
	return s, nil
}

// latencies sums each wanted webhook's histogram series (one per
// operation and rejected) by bucket bound, as sum by (le) does.
func latencies(mf *dto.MetricFamily, byName map[[2]string][]Webhook) (map[Webhook]Histogram, error) {
	out := map[Webhook]Histogram{}
	if mf == nil || mf.GetType() != dto.MetricType_HISTOGRAM {
		return out, nil
	}
	sums := map[Webhook]map[float64]float64{}
	for _, m := range mf.GetMetric() {
		var name, typ string
		for _, lp := range m.GetLabel() {
			switch lp.GetName() {
			case "name":
				name = lp.GetValue()
			case "type":
				typ = lp.GetValue()
			}
		}
		whs := byName[[2]string{name, typ}]
		if len(whs) == 0 || m.Histogram == nil {
			continue
		}
		h := m.GetHistogram()
		for _, wh := range whs {
			b := sums[wh]
			if b == nil {
				b = map[float64]float64{}
				sums[wh] = b
			}
			hasInf := false
			for _, bk := range h.GetBucket() {
				b[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
				hasInf = hasInf || math.IsInf(bk.GetUpperBound(), 1)
			}
			if !hasInf { // the +Inf bucket is the count
				b[math.Inf(1)] += float64(h.GetSampleCount())
			}
			if len(b) > MaxBuckets {
				return nil, fmt.Errorf("apiserver metrics: %s for %s has more than %d bucket bounds", AdmissionDuration, wh.Name, MaxBuckets)
			}
			acc := out[wh]
			acc.Count += float64(h.GetSampleCount())
			acc.Sum += h.GetSampleSum()
			out[wh] = acc
		}
	}
	for wh, b := range sums {
		acc := out[wh]
		for _, le := range slices.Sorted(maps.Keys(b)) {
			acc.Buckets = append(acc.Buckets, Bucket{UpperBound: le, Count: b[le]})
		}
		out[wh] = acc
	}
	return out, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// filter keeps the lines of the families Parse reads: their samples and
// their HELP and TYPE comments.
func filter(r io.Reader, keep map[string]bool) ([]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var out bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		if family(line, keep) != "" {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("apiserver metrics: a line longer than %d bytes", maxLine)
		}
		return nil, fmt.Errorf("reading apiserver metrics: %w", err)
	}
	return out.Bytes(), nil
}

// family returns the wanted family a line belongs to, or "". It looks at
// the bytes without copying them: most lines are dropped.
func family(line []byte, keep map[string]bool) string {
	if rest, ok := bytes.CutPrefix(line, []byte("# ")); ok {
		if !bytes.HasPrefix(rest, []byte("HELP ")) && !bytes.HasPrefix(rest, []byte("TYPE ")) {
			return ""
		}
		line = rest[len("HELP "):]
	}
	name := line
	if i := bytes.IndexAny(line, "{ \t"); i >= 0 {
		name = line[:i]
	}
	if len(name) == 0 || (name[0] != 'a' && name[0] != 'p') {
		return ""
	}
	if keep[string(name)] { // no allocation: the compiler reads the map with the bytes
		return string(name)
	}
	return ""
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
