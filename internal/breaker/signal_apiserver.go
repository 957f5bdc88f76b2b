package breaker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/breakermetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// Scraper reads kube-apiserver's webhook call counters;
// *apimetrics.Scraper implements it.
type Scraper interface {
	Scrape(ctx context.Context, want map[apimetrics.Webhook]bool) (apimetrics.Sample, error)
}

var _ Scraper = (*apimetrics.Scraper)(nil)

// DisagreeAfter is how many apiserver observations in a row must
// contradict the direct probe before the disagreement is reported.
const DisagreeAfter = 3

// MinScrapeInterval is the shortest interval between two reads of
// kube-apiserver's /metrics: each makes kube-apiserver gather every metric
// it has (about 0.2 s of its CPU with 200 CRDs, 23 ms on a bare test
// control plane), so even the shortest configured interval
// (config.MinAPIServerScrapeInterval) means no more than one a second.
const MinScrapeInterval = config.MinAPIServerScrapeInterval

// maxWindowIntervals is how many intervals the apiserver signal waits for
// minRequests calls before it drops the window as Unknown.
const maxWindowIntervals = 10

// apiserverSignal is the ProbeRunner's state for the apiserver signal:
// one scrape per interval for every target together.
type apiserverSignal struct {
	// mu serializes scrapes: the interval's, and the one before a close
	// (refreshAdmitted). The tracker is not safe for concurrent use.
	mu         sync.Mutex
	interval   time.Duration
	targets    []config.Target
	want       map[apimetrics.Webhook]bool
	thresholds map[apimetrics.Webhook]apimetrics.Thresholds
	tracker    apimetrics.Tracker
	// failing is the last scrape error's kind, so that it is logged and
	// reported once, not every interval.
	failing string
	// refreshed is when refreshAdmitted last scraped: at most one such
	// extra scrape per MinScrapeInterval, whatever the closes.
	refreshed time.Time
}

// newAPIServerSignal returns the signal's state for the targets that
// enable it, scraped every interval (never more often than
// MinScrapeInterval), or nil when none does.
func newAPIServerSignal(targets []config.Target, interval time.Duration) *apiserverSignal {
	s := &apiserverSignal{want: map[apimetrics.Webhook]bool{}, thresholds: map[apimetrics.Webhook]apimetrics.Thresholds{}}
	for _, t := range targets {
		if !t.APIServerSignal.Enabled {
			continue
		}
		s.targets = append(s.targets, t)
		wh := metricsWebhook(t)
		s.want[wh] = true
		th := apimetrics.Thresholds{MinRequests: t.APIServerSignal.MinRequests, FailureRatio: t.APIServerSignal.FailureRatio}
		if t.APIServerSignal.TrafficAsProbe {
			th.FastWithin = t.Probe.Timeout
		}
		if prev, ok := s.thresholds[wh]; ok {
			// Two configurations with a webhook of the same name share the
			// apiserver's counters; judge them by the stricter thresholds.
			th.MinRequests = max(th.MinRequests, prev.MinRequests)
			th.FailureRatio = max(th.FailureRatio, prev.FailureRatio)
			if prev.FastWithin > 0 && (th.FastWithin == 0 || prev.FastWithin < th.FastWithin) {
				th.FastWithin = prev.FastWithin
			}
		}
		s.thresholds[wh] = th
	}
	if len(s.targets) == 0 {
		return nil
	}
	s.interval = max(interval, MinScrapeInterval)
	s.tracker.MaxWindow = maxWindowIntervals * s.interval
	return s
}

// metricsWebhook names t in the apiserver's metrics.
func metricsWebhook(t config.Target) apimetrics.Webhook {
	typ := apimetrics.Mutating
	if t.Kind == circuit.KindValidating {
		typ = apimetrics.Validating
	}
	wh := apimetrics.Webhook{Name: t.Webhook, Type: typ}
	if t.Kind == circuit.KindMutating {
		wh.MarkingPolicy = marking.Name(t.Configuration, t.Webhook)
	}
	return wh
}

func (r *ProbeRunner) signalLoop(ctx context.Context, s *apiserverSignal) {
	ctx = logf.IntoContext(ctx, logf.FromContext(ctx).WithValues("signal", decide.SignalAPIServer))
	for {
		// Reads start every interval, not an interval after the last one
		// ended: a slow read under load would otherwise stretch the gap
		// between two scrapes past trafficFresh, and a probe that traffic
		// stands in for would slip in between.
		start := r.Clock.Now()
		r.ScrapeOnce(ctx, s)
		timer := r.Clock.NewTimer(max(s.interval-r.Clock.Since(start), 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
	}
}

// ScrapeOnce reads the apiserver's metrics once, feeds one observation
// per target to State, and wakes the ConfigurationReconciler when the
// evidence could change a configuration's step (decide.Due).
func (r *ProbeRunner) ScrapeOnce(ctx context.Context, s *apiserverSignal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := logf.FromContext(ctx)
	start := r.Clock.Now()
	sample, err := r.Scraper.Scrape(ctx, s.want)
	r.Metrics.ScrapeDuration.Observe(r.Clock.Since(start).Seconds())
	if sample.Bytes > 0 {
		r.Metrics.ScrapeBytes.Set(float64(sample.Bytes))
	}
	var results map[apimetrics.Webhook]apimetrics.Result
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		kind, advice := breakermetrics.ScrapeError, "the apiserver signal is Unknown until a scrape succeeds; only the direct probe judges webhooks meanwhile"
		if apierrors.IsForbidden(err) {
			kind, advice = breakermetrics.ScrapeForbidden, "webhook-guard may not read the apiserver's /metrics (RBAC: get on the non-resource URL /metrics); the apiserver signal is Unknown and opens nothing, and only the direct probe judges webhooks"
		}
		r.Metrics.ScrapeErrors.WithLabelValues(kind).Inc()
		if s.failing != kind {
			s.failing = kind
			log.Error(err, "Reading the apiserver's /metrics failed", "advice", advice)
			if kind == breakermetrics.ScrapeForbidden {
				r.eventOnTargets(ctx, s.targets, corev1.EventTypeWarning, "APIServerSignalUnknown", advice)
			}
		}
		results = map[apimetrics.Webhook]apimetrics.Result{}
		for wh := range s.want {
			results[wh] = apimetrics.Result{Observation: apimetrics.Observation{Verdict: apimetrics.Unknown, Why: "scrape failed"}}
		}
	} else {
		switch {
		case sample.Instance == 0 && s.failing != scrapeNoInstance:
			s.failing = scrapeNoInstance
			advice := "kube-apiserver's /metrics carry no process_start_time_seconds, so one apiserver's counters cannot be told from another's behind the kubernetes Service: the apiserver signal is Unknown and opens nothing, and only the direct probe judges webhooks"
			log.Info("The apiserver's /metrics carry no process_start_time_seconds; the apiserver signal is Unknown", "advice", advice)
			r.eventOnTargets(ctx, s.targets, corev1.EventTypeWarning, "APIServerSignalUnknown", advice)
		case sample.Instance != 0 && s.failing != "":
			log.Info("Reading the apiserver's /metrics works again")
			s.failing = ""
		}
		results = s.tracker.Observe(sample, start, s.thresholds)
	}
	names := r.webhookNames(ctx)
	for _, t := range s.targets {
		res := results[metricsWebhook(t)]
		// kube-apiserver counts every webhook of a name as one: another
		// configuration's calls would stand in for this one's.
		alone := names.alone(t)
		if t.APIServerSignal.TrafficAsProbe {
			healthy := res.Traffic.Healthy() && alone
			if was := r.State.ObserveTraffic(t.Key(), healthy, start); was && !healthy {
				r.kick(t.Key())
			}
		}
		r.observeAPIServer(ctx, t, res, succeedingSince(res, start, alone))
	}
}

// succeedingSince is when the window of res, observed at at, began, if
// kube-apiserver made calls to the webhook in it and none failed, and no
// other configuration has a webhook of its name (alone); zero otherwise
// (decide.Counts.SucceedingSince).
func succeedingSince(res apimetrics.Result, at time.Time, alone bool) time.Time {
	if res.Verdict != apimetrics.Healthy || res.Calls == 0 || res.Failed > 0 || !alone {
		return time.Time{}
	}
	return at.Add(-res.Window)
}

// sharedKey is a webhook name of one kind of configuration.
type sharedKey struct {
	kind circuit.Kind
	name string
}

// nameIndex lists, for each webhook name of each kind, the configurations
// holding a webhook of that name, sorted: kube-apiserver's metrics name
// webhooks by name only, so the calls of all of them are counted as one
// (Istio's revisions do exactly this).
type nameIndex map[sharedKey][]string

// sharedWith returns the first configuration other than t's that holds a
// webhook of t's kind and name, or "".
func (idx nameIndex) sharedWith(t config.Target) string {
	for _, name := range idx[sharedKey{t.Kind, t.Webhook}] {
		if name != t.Configuration {
			return name
		}
	}
	return ""
}

// alone reports whether t's configuration is the only one holding a
// webhook of t's kind and name.
func (idx nameIndex) alone(t config.Target) bool {
	return len(idx[sharedKey{t.Kind, t.Webhook}]) == 1
}

// webhookNames indexes the webhook names of every configuration, from
// the cache. A kind whose list fails has no names: then no traffic stands
// in for a probe, and no configuration is named as sharing one.
func (r *ProbeRunner) webhookNames(ctx context.Context) nameIndex {
	idx := nameIndex{}
	opts := &client.ListOptions{UnsafeDisableDeepCopy: ptr.To(true)}
	mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := r.Reader.List(ctx, mutating, opts); err == nil {
		for _, c := range mutating.Items {
			for _, wh := range c.Webhooks { // names are unique in a configuration
				idx[sharedKey{circuit.KindMutating, wh.Name}] = append(idx[sharedKey{circuit.KindMutating, wh.Name}], c.Name)
			}
		}
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := r.Reader.List(ctx, validating, opts); err == nil {
		for _, c := range validating.Items {
			for _, wh := range c.Webhooks {
				idx[sharedKey{circuit.KindValidating, wh.Name}] = append(idx[sharedKey{circuit.KindValidating, wh.Name}], c.Name)
			}
		}
	}
	for _, names := range idx {
		slices.Sort(names)
	}
	return idx
}

// observeAPIServer records one apiserver observation of t, with its
// decide.Counts.SucceedingSince.
func (r *ProbeRunner) observeAPIServer(ctx context.Context, t config.Target, res apimetrics.Result, succeeding time.Time) {
	log := logf.FromContext(ctx)
	labels := []string{string(t.Kind), t.Configuration, t.Webhook}
	target := []any{"kind", t.Kind, "configuration", t.Configuration, "webhook", t.Webhook}
	obj := t.Kind.New()
	// Read only, like the probe loop's: no copy.
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: t.Configuration}, obj, &client.GetOptions{UnsafeDisableDeepCopy: ptr.To(true)}); err != nil {
		return // the probe loop reports a missing configuration
	}
	view, err := circuit.ReadView(obj)
	if err != nil {
		return
	}
	open := false
	if rec, err := circuit.Decode(obj.GetAnnotations()); err == nil {
		entry, ok := rec[t.Webhook]
		open = ok && entry.Mine(r.Signer)
	}
	pr := probe.Result{Duration: res.Window}
	switch res.Verdict {
	case apimetrics.Failing:
		pr.Outcome, pr.Reason, pr.Err = probe.OutcomeFailed, decide.ReasonAPIServerCalls, errors.New(res.String())
	case apimetrics.Healthy:
		pr.Outcome = probe.OutcomeHealthy
	default:
		pr.Outcome, pr.Err = probe.OutcomeUnknown, errors.New(res.String())
	}
	if pr.Outcome == probe.OutcomeFailed && r.roads != nil {
		// Its road, if the schedule probes it, goes next: whether the
		// calls fail on the road is for the path probe to say.
		r.roads.hurry(t.Key())
	}
	r.Metrics.APIServerObservations.WithLabelValues(append(labels, string(res.Verdict))...).Inc()
	if open && res.Admitted > 0 {
		r.Metrics.AdmittedWithout.WithLabelValues(labels...).Add(res.Admitted)
	}
	st := r.State.ObserveAPIServer(t.Key(), pr, succeeding, res.Admitted, res.Marked, open)
	if log.V(1).Enabled() {
		log.V(1).Info("Apiserver signal observed", append(target, "verdict", res.Verdict, "observation", res.String())...)
	}

	for _, side := range []string{decide.SignalAPIServer, decide.SignalProbe} {
		r.Metrics.SignalsDisagree.WithLabelValues(append(labels, side)...).Set(boolGauge(st.Disagree == side && st.DisagreeFor >= DisagreeAfter))
	}
	if st.DisagreeFor == DisagreeAfter && pr.Outcome != probe.OutcomeUnknown {
		msg := disagreementMessage(t, st)
		log.Info("The direct probe and the apiserver's own calls disagree", append(target, "failing", st.Disagree, "detail", msg)...)
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "SignalsDisagree", "Probe", "%s", msg)
	}
	r.judgeObserved(ctx, t, obj)
	if pr.Outcome != probe.OutcomeFailed && view.Annotations[circuit.Annotation] == "" {
		// As in ProbeOnce: an observation that is not failing gives Plan
		// nothing to do on a configuration with no open circuit.
		return
	}
	r.wake(ctx, t.Kind, obj, view, r.inputs(t.Kind, view))
}

// refreshAdmitted reads the apiserver's counters once more, just before
// the circuits of a configuration close, and adds what it admitted without
// each open target since the last scrape: the closing Event then counts
// every request up to the close, however short the circuit was open
// (scrapes are at least MinScrapeInterval apart). It judges nothing
// (apimetrics.Tracker.Admitted), runs at most once per MinScrapeInterval,
// and a failed scrape adds nothing.
func (r *ProbeRunner) refreshAdmitted(ctx context.Context, kind circuit.Kind, view *circuit.ConfigView) {
	s := r.signal
	if s == nil || r.Scraper == nil {
		return
	}
	rec, err := circuit.Decode(view.Annotations)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := r.Clock.Now()
	if !s.refreshed.IsZero() && now.Sub(s.refreshed) < MinScrapeInterval {
		return
	}
	s.refreshed = now
	sample, err := r.Scraper.Scrape(ctx, s.want)
	if err != nil {
		return
	}
	admitted := s.tracker.Admitted(sample, s.want)
	for _, t := range s.targets {
		if t.Kind != kind || t.Configuration != view.Name {
			continue
		}
		entry, open := rec[t.Webhook]
		res := admitted[metricsWebhook(t)]
		if !open || !entry.Mine(r.Signer) || (res.Admitted == 0 && res.Marked == 0) {
			continue
		}
		r.Metrics.AdmittedWithout.WithLabelValues(string(t.Kind), t.Configuration, t.Webhook).Add(res.Admitted)
		r.State.AddAdmitted(t.Key(), res.Admitted, res.Marked)
	}
}

// disagreementMessage explains st's disagreement, pointing at the network
// path between the control plane and the webhook.
func disagreementMessage(t config.Target, st TargetStatus) string {
	if st.Disagree == decide.SignalAPIServer {
		return circuit.EventNote("%s: the direct probe is healthy but the apiserver's own calls fail (%v) for %d intervals%s",
			t.Webhook, st.APIServer.Last.Err, st.DisagreeFor, decide.PathSays(t, st.Path))
	}
	if decide.SlowVetoed(st.Counts, st.APIServer) {
		return circuit.EventNote("%s: the direct probe gives up at its timeout (%s: %v) but the apiserver's own calls succeed, for %d intervals: "+
			"the webhook answers within its timeoutSeconds, later than the probe waits (or the guard's own path to it is slow); "+
			"no circuit opens on these probes while the calls keep succeeding; if such answers are normal for this webhook, raise probe.timeout",
			t.Webhook, st.Counts.Last.Reason, st.Counts.Last.Err, st.DisagreeFor)
	}
	return fmt.Sprintf("%s: the direct probe fails (%s: %v) but the apiserver's own calls succeed, for %d intervals: the guard's path to the webhook is broken, not the webhook; check the guard's NetworkPolicy egress, DNS and its node",
		t.Webhook, st.Counts.Last.Reason, st.Counts.Last.Err, st.DisagreeFor)
}

// scrapeNoInstance is apiserverSignal.failing while the scraped metrics
// carry no process start time.
const scrapeNoInstance = "no-instance"

// eventOnTargets emits one Event on each configuration of targets.
func (r *ProbeRunner) eventOnTargets(ctx context.Context, targets []config.Target, eventType, reason, message string) {
	done := []string{}
	for _, t := range targets {
		key := string(t.Kind) + "/" + t.Configuration
		if slices.Contains(done, key) {
			continue
		}
		done = append(done, key)
		obj := t.Kind.New()
		if err := r.Reader.Get(ctx, client.ObjectKey{Name: t.Configuration}, obj); err == nil {
			r.Recorder.Eventf(obj, nil, eventType, reason, "Probe", "%s", message)
		}
	}
}
