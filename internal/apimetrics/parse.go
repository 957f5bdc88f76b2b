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
	"strconv"
	"strings"
	"unicode/utf8"

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

var families = newFamilySet(RequestTotal, RejectionCount, FailOpenCount, MatchConditionExclusions, MutatingPolicyChecks, ProcessStartTime)

// latencyFamilies are families plus the histogram's lines: its HELP and
// TYPE comments name the family, its samples carry a suffix.
var latencyFamilies = newFamilySet(append(families.list(), AdmissionDuration, AdmissionDuration+"_bucket", AdmissionDuration+"_sum", AdmissionDuration+"_count")...)

// Families returns the names of the metric families a scrape needs, as
// the exposition's HELP and TYPE lines name them (a histogram by its base
// name): what Scraper asks the apiserver for with name[].
func Families(opts ParseOptions) []string {
	names := families.list()
	if opts.Latency {
		names = append(names, AdmissionDuration)
	}
	return names
}

// familySet is the set of metric names whose lines filter keeps, with a
// cheap test that rejects almost every other line before it is
// tokenized: a kept line begins with the first stemLen bytes of a kept
// name, and a real apiserver's lines mostly differ from those within a
// dozen bytes.
type familySet struct {
	// names maps each name to itself: family returns the map's string,
	// and allocates none per line.
	names map[string]string
	// stems are the distinct prefixes, stemLen bytes long, of names;
	// stemLen is the length of the shortest name.
	stems   [][]byte
	stemLen int
}

func newFamilySet(names ...string) *familySet {
	fs := &familySet{names: map[string]string{}}
	for _, n := range names {
		fs.names[n] = n
		if fs.stemLen == 0 || len(n) < fs.stemLen {
			fs.stemLen = len(n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(fs.names)) {
		if stem := []byte(n[:fs.stemLen]); !slices.ContainsFunc(fs.stems, func(s []byte) bool { return bytes.Equal(s, stem) }) {
			fs.stems = append(fs.stems, stem)
		}
	}
	return fs
}

// list returns the names, sorted.
func (fs *familySet) list() []string { return slices.Sorted(maps.Keys(fs.names)) }

// mayHold says whether a line's text, after any "# HELP " or "# TYPE ",
// can begin with a kept name. False means filter drops the line; true
// means family must look closer.
func (fs *familySet) mayHold(text []byte) bool {
	if len(text) < fs.stemLen {
		return false
	}
	for _, s := range fs.stems {
		if bytes.HasPrefix(text, s) {
			return true
		}
	}
	return false
}

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
// the webhooks in want. Lines of other families, and well-formed counter
// samples of webhooks not in want, are dropped before the Prometheus text
// parser sees them, so time and memory grow with the wanted webhooks'
// series, not with the whole response nor with every webhook in the
// cluster. A bad line of a wanted family is still an error.
func Parse(r io.Reader, want map[Webhook]bool) (Sample, error) {
	return Read(r, want, ParseOptions{})
}

// Read is Parse with options: with opts.Latency it also reads the
// webhooks' latency histograms, within the same limits.
func Read(r io.Reader, want map[Webhook]bool, opts ParseOptions) (Sample, error) {
	return read(r, want, opts, newSelector(want))
}

// read is Read with the selector filter uses; nil drops no sample of a
// kept family.
func read(r io.Reader, want map[Webhook]bool, opts ParseOptions, sel *selector) (Sample, error) {
	keep := families
	if opts.Latency {
		keep = latencyFamilies
	}
	counted := &countingReader{r: io.LimitReader(r, MaxBytes+1)}
	kept, err := filter(counted, keep, sel)
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

// scanBuffer is the scanner's first buffer; it grows up to maxLine for a
// longer line.
const scanBuffer = 4 << 10

// filter keeps the lines of the families Parse reads: their samples and
// their HELP and TYPE comments. With a selector, it also drops the
// well-formed samples of counters that no webhook asked for counts (see
// selector); a nil selector drops none.
func filter(r io.Reader, keep *familySet, sel *selector) ([]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, scanBuffer), maxLine)
	var out bytes.Buffer
	// counters are the families whose TYPE line, already read, says
	// counter: only their samples are dropped by label.
	counters := map[string]bool{}
	for sc.Scan() {
		line := sc.Bytes()
		fam := family(line, keep)
		if fam == "" {
			continue
		}
		if line[0] == '#' {
			if t, ok := bytes.CutPrefix(line, []byte("# TYPE "+fam+" ")); ok && bytes.EqualFold(t, []byte("counter")) {
				counters[fam] = true
			}
		} else if sel != nil && counters[fam] && sel.drops(fam, line) {
			continue
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("apiserver metrics: a line longer than %d bytes", maxLine)
		}
		return nil, fmt.Errorf("reading apiserver metrics: %w", err)
	}
	return out.Bytes(), nil
}

// selector drops, before the Prometheus parser sees them, the counter
// samples of webhooks and policies nobody asked for: a cluster with a
// thousand webhooks serves a thousand series of RequestTotal, and the
// text parser costs far more per line than this. It drops only what
// Read would ignore: a sample in the canonical form client_golang writes
// (metric{label="value",...} value [timestamp], legacy label names, no
// blanks, each label once, valid UTF-8, a value the parser reads) whose
// "name" (or, for MutatingPolicyChecks, "policy") is not wanted. Any
// other line is kept, so the parser still reports it if it is bad.
type selector struct {
	names, policies map[string]bool
}

// newSelector returns the selector for want, or nil when some wanted name
// could be written otherwise than verbatim in a label value.
func newSelector(want map[Webhook]bool) *selector {
	sel := &selector{names: map[string]bool{}, policies: map[string]bool{}}
	verbatim := func(v string) bool {
		return v != "" && utf8.ValidString(v) && !strings.ContainsAny(v, "\\\"\n")
	}
	for wh := range want {
		if !verbatim(wh.Name) || (wh.MarkingPolicy != "" && !verbatim(wh.MarkingPolicy)) {
			return nil
		}
		sel.names[wh.Name] = true
		if wh.MarkingPolicy != "" {
			sel.policies[wh.MarkingPolicy] = true
		}
	}
	return sel
}

// drops says whether the sample line of counter family fam can be
// dropped: it is canonical and carries no wanted name or policy.
func (sel *selector) drops(fam string, line []byte) bool {
	key, wanted := "name", sel.names
	switch fam {
	case MutatingPolicyChecks:
		key, wanted = "policy", sel.policies
	case ProcessStartTime:
		return false
	}
	rest, ok := bytes.CutPrefix(line[len(fam):], []byte("{"))
	if !ok {
		return false
	}
	var seen [8][]byte // label names, to refuse a repeated one as the parser does
	n := 0
	var value []byte // an absent label is "", which is never wanted
	for {
		eq := bytes.IndexByte(rest, '=')
		if eq <= 0 || n == len(seen) || !legacyLabelName(rest[:eq]) || string(rest[:eq]) == model.MetricNameLabel {
			return false
		}
		name := rest[:eq]
		for _, s := range seen[:n] {
			if bytes.Equal(s, name) {
				return false
			}
		}
		seen[n] = name
		n++
		rest = rest[eq+1:]
		if len(rest) == 0 || rest[0] != '"' {
			return false
		}
		end := closingQuote(rest[1:])
		if end < 0 {
			return false
		}
		v := rest[1 : 1+end]
		if !utf8.Valid(v) {
			return false
		}
		if string(name) == key {
			value = v
		}
		rest = rest[1+end+1:]
		if len(rest) == 0 {
			return false
		}
		if rest[0] == '}' {
			rest = rest[1:]
			break
		}
		if rest[0] != ',' {
			return false
		}
		rest = rest[1:]
	}
	if !sampleValue(rest) {
		return false
	}
	return !wanted[string(value)]
}

// closingQuote returns the index in v of the quote that ends a label
// value, past the escapes the text parser knows (\\, \" and \n), or -1
// when there is none or another escape comes first.
func closingQuote(v []byte) int {
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\\':
			if i+1 == len(v) || (v[i+1] != '\\' && v[i+1] != '"' && v[i+1] != 'n') {
				return -1
			}
			i++
		case '"':
			return i
		}
	}
	return -1
}

// legacyLabelName is [a-zA-Z_][a-zA-Z0-9_]*.
func legacyLabelName(b []byte) bool {
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return len(b) > 0
}

// sampleValue says whether rest is " value" or " value timestamp" as the
// text parser reads them.
func sampleValue(rest []byte) bool {
	rest, ok := bytes.CutPrefix(rest, []byte(" "))
	if !ok {
		return false
	}
	v, ts, hasTS := bytes.Cut(rest, []byte(" "))
	if !digits(v, 15) { // most counters: no allocation for ParseFloat's string
		if bytes.ContainsAny(v, "pP_\t") {
			return false
		}
		if _, err := strconv.ParseFloat(string(v), 64); err != nil {
			return false
		}
	}
	if hasTS && !digits(ts, 18) {
		if len(ts) == 0 || bytes.ContainsAny(ts, " \t+_") {
			return false
		}
		if _, err := strconv.ParseInt(string(ts), 10, 64); err != nil {
			return false
		}
	}
	return true
}

// digits says whether b is 1 to most decimal digits: a number both
// strconv.ParseFloat and strconv.ParseInt read.
func digits(b []byte, most int) bool {
	if len(b) == 0 || len(b) > most {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// family returns the wanted family a line belongs to, or "". It looks at
// the bytes without copying them: most lines are dropped, and most of
// those by keep.mayHold, before the name is even delimited.
func family(line []byte, keep *familySet) string {
	if rest, ok := bytes.CutPrefix(line, []byte("# ")); ok {
		if !bytes.HasPrefix(rest, []byte("HELP ")) && !bytes.HasPrefix(rest, []byte("TYPE ")) {
			return ""
		}
		line = rest[len("HELP "):]
	}
	if !keep.mayHold(line) {
		return ""
	}
	name := line
	if i := bytes.IndexAny(line, "{ \t"); i >= 0 {
		name = line[:i]
	}
	return keep.names[string(name)] // no allocation: the compiler reads the map with the bytes
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
