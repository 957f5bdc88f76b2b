package breaker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakermetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// Prober probes one webhook; *probe.Prober implements it.
type Prober interface {
	Probe(ctx context.Context, wh admissionregistrationv1.MutatingWebhook, spec probe.Spec) probe.Result
}

var _ Prober = (*probe.Prober)(nil)

// ProbeRunner probes every target at its interval, feeds the results to
// State, and wakes the ConfigurationReconciler when the evidence could
// change a configuration's step (decide.Due). It runs on the leader only.
type ProbeRunner struct {
	// Reader reads webhook configurations (the manager's cache).
	Reader client.Reader
	// Prober reaches the webhooks.
	Prober Prober
	// Targets are the approved webhooks.
	Targets []config.Target
	// State receives the results.
	State *State
	// Metrics receive probe durations and failures.
	Metrics *breakermetrics.Metrics
	// Recorder emits Events for targets that cannot be probed.
	Recorder recorder.EventRecorder
	// Triggers wake the ConfigurationReconciler of each configuration kind.
	Triggers map[circuit.Kind]chan<- event.GenericEvent
	// Clock drives the intervals. Default: the real clock.
	Clock clock.WithTicker
	// Signer is the entries' signer, as in ConfigurationReconciler.
	Signer string
	// DiagnoseTLS, when set, explains a TLS probe failure from the
	// configuration's annotations (for example cert-manager's CA
	// injection). It returns "" when it has nothing to say.
	DiagnoseTLS func(ctx context.Context, annotations map[string]string) string
	// Scraper, when set, reads kube-apiserver's /metrics once per interval
	// for the targets whose apiserverSignal is enabled: the second health
	// signal.
	Scraper Scraper
	// PathProber, when set, probes kube-apiserver's own road to a
	// service-backed webhook (its service proxy): every interval, within
	// PathProbeGap, for the targets ContinuousRoad covers; for the
	// others while the apiserver's calls fail, and while a circuit the road
	// opened is open. Without it the apiserver signal opens nothing.
	PathProber PathProber

	// ScrapeInterval is how often the apiserver signal reads
	// kube-apiserver's /metrics (config.Configuration
	// .APIServerScrapeInterval); never more often than MinScrapeInterval.
	ScrapeInterval time.Duration

	// roads is the road schedule: the continuous path probe of the
	// targets ContinuousRoad covers; nil without a PathProber.
	roads *roadSchedule
	// signal is the apiserver signal's state, when a target enables it.
	signal *apiserverSignal
	// kicks wake each target's probe loop before its next slot, by key.
	kicks map[string]chan struct{}

	holding atomic.Bool
	// inFlight counts each target's outstanding probes, by key.
	inFlight map[string]*atomic.Int32
	// recovering says, by key, that the target's circuit was open at its
	// last probe: its probes then look for recovery, one at a time, within
	// the Prober's budget of new connections (probe.Spec.Recovery).
	recovering map[string]*atomic.Bool
	// byConfiguration holds the targets of each configuration, by kind
	// and name, so a probe does not search every target; built once, on
	// first use.
	byConfiguration map[configurationKey][]config.Target
	indexOnce       sync.Once
	// decoded holds the last record and arming entries decoded for each
	// configuration (snapshot).
	decoded sync.Map // configurationKey → decoded
}

// decoded is a configuration's record and arming entries as decoded from
// their annotations' text.
type decoded struct {
	record, arming string
	s              decide.Snapshot
}

// snapshot is decide.Read(view), decoding the record and the arming
// entries only when their text changed since the last probe of the
// configuration: every probe asks decide.Due, and decoding them on each
// was 6% of the guard's CPU in a mass failure of 1,000 webhooks.
func (r *ProbeRunner) snapshot(kind circuit.Kind, view *circuit.ConfigView) decide.Snapshot {
	k := configurationKey{kind, view.Name}
	record, arming := view.Annotations[circuit.Annotation], view.Annotations[circuit.ArmingAnnotation]
	if v, ok := r.decoded.Load(k); ok {
		if d := v.(decoded); d.record == record && d.arming == arming {
			s := d.s
			s.View = view
			return s
		}
	}
	s := decide.Read(view)
	r.decoded.Store(k, decoded{record: record, arming: arming, s: s})
	return s
}

// FirstProbesPerSecond bounds how many targets start probing per second
// when the runner starts. A target's first probe dials its webhook, and a
// TLS handshake costs the guard 1-3 ms of CPU (hack/bench): a thousand of
// them in one second want several times the Deployment's 0.5 core, and a
// probe whose answer then comes after its timeout closes the connection
// it waited on, so the next one dials again and the guard never catches
// up (measured: 2,900 Unknown probes and a lost Lease at 1,000 url
// targets). At 100 a second the first round costs about 0.1-0.3 core.
const FirstProbesPerSecond = 100

// FirstSpread is the window over which the first probes of targets
// targets spread: one probe interval, or targets/FirstProbesPerSecond
// seconds when that is longer (10 s at 1,000 targets).
func FirstSpread(interval time.Duration, targets int) time.Duration {
	return max(interval, time.Duration(targets)*time.Second/FirstProbesPerSecond)
}

// MaxProbesInFlight is how many probes of t may be outstanding at once
// while its circuit is closed: enough for a hanging webhook to reach the
// threshold with one probe started every interval. While it is open its
// probes look for recovery, which is not urgent, and one at a time: a
// hanging webhook's probe loses its connection at its timeout, and a
// thousand open circuits of hanging webhooks probed several at a time
// cost the guard a TLS handshake each every second (hack/bench).
func MaxProbesInFlight(t config.Target, open bool) int {
	if open {
		return 1
	}
	return max(t.OpenAfter, t.CloseAfter, 1)
}

type configurationKey struct {
	kind circuit.Kind
	name string
}

var (
	_ manager.Runnable               = (*ProbeRunner)(nil)
	_ manager.LeaderElectionRunnable = (*ProbeRunner)(nil)
)

// NeedLeaderElection reports true: only the leader probes and counts.
func (r *ProbeRunner) NeedLeaderElection() bool { return true }

// Start probes until ctx ends.
func (r *ProbeRunner) Start(ctx context.Context) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.kicks = make(map[string]chan struct{}, len(r.Targets))
	r.State.Configure(r.Targets)
	for _, t := range r.Targets {
		r.State.Register(t.Key())
		r.kicks[t.Key()] = make(chan struct{}, 1)
	}
	if s := newAPIServerSignal(r.Targets, r.ScrapeInterval); s != nil && r.Scraper != nil {
		r.signal = s
	}
	r.inFlight = make(map[string]*atomic.Int32, len(r.Targets))
	r.recovering = make(map[string]*atomic.Bool, len(r.Targets))
	for _, t := range r.Targets {
		r.inFlight[t.Key()] = &atomic.Int32{}
		r.recovering[t.Key()] = &atomic.Bool{}
	}
	var wg sync.WaitGroup
	if r.PathProber != nil {
		r.roads = newRoadSchedule()
		wg.Go(func() { r.roadLoop(ctx, &wg) })
	}
	for _, t := range r.Targets {
		wg.Go(func() { r.loop(ctx, t, &wg) })
	}
	if r.signal != nil {
		if rare := trafficTooRare(r.Targets, r.signal.interval); len(rare) > 0 {
			logf.FromContext(ctx).Info("Traffic does not stand in for these targets' probes: kube-apiserver's /metrics is read less often than they are probed (apiserverScrapeInterval); each read costs kube-apiserver a gathering of all its metrics",
				"apiserverScrapeInterval", r.signal.interval, "targets", len(rare), "first", rare[0])
		}
		wg.Go(func() { r.signalLoop(ctx, r.signal) })
	}
	wg.Wait()
	return nil
}

// loop starts a probe of t every interval, without waiting for the ones
// still outstanding (at most MaxProbesInFlight at once): a hanging
// webhook then fails a probe every interval from the moment it hangs,
// each after the probe's timeout (probe.DefaultSlowCall by default), not
// one per timeout plus interval. The probes it starts join wg.
func (r *ProbeRunner) loop(ctx context.Context, t config.Target, wg *sync.WaitGroup) {
	ctx = logf.IntoContext(ctx, logf.FromContext(ctx).WithValues("kind", t.Kind, "configuration", t.Configuration, "webhook", t.Webhook))
	// Spread the targets' probes across the interval instead of starting
	// them all on the same instant, and the first ones over long enough
	// that their connections are not all dialled at once (FirstSpread).
	jitter := rand.N(FirstSpread(t.Probe.Interval, len(r.Targets)))
	due := r.Clock.Now().Add(jitter)
	first := r.Clock.NewTimer(jitter)
	select {
	case <-ctx.Done():
		first.Stop()
		return
	case <-first.C():
	}
	inFlight, recovering := r.inFlight[t.Key()], r.recovering[t.Key()]
	for {
		r.Metrics.ProbeLateness.Observe(max(r.Clock.Since(due), 0).Seconds())
		if inFlight.Load() < int32(MaxProbesInFlight(t, recovering.Load())) {
			inFlight.Add(1)
			wg.Go(func() {
				defer inFlight.Add(-1)
				r.ProbeOnce(ctx, t)
			})
		} else {
			logf.FromContext(ctx).V(1).Info("Probe not started: as many as allowed are still waiting", "inFlight", inFlight.Load())
		}
		due = r.Clock.Now().Add(t.Probe.Interval)
		// A timer, not a ticker: a ticker keeps a tick while the guard
		// is starved, and the probes after it would start back to back.
		timer := r.Clock.NewTimer(t.Probe.Interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		case <-r.kicks[t.Key()]:
			// The apiserver's calls no longer stand in for the probe.
			timer.Stop()
			due = r.Clock.Now()
		}
	}
}

// ProbeOnce probes t once, records the result, and wakes the
// ConfigurationReconciler when the evidence could change its step
// (decide.Due). It observes; the reconciler's decide.NextStep decides.
func (r *ProbeRunner) ProbeOnce(ctx context.Context, t config.Target) {
	obj, view, wh := r.probeable(ctx, t)
	if wh == nil {
		return
	}
	labels := []string{string(t.Kind), t.Configuration, t.Webhook}
	r.Metrics.TargetMissing.WithLabelValues(labels...).Set(0)
	r.Metrics.TargetUnprobeable.WithLabelValues(labels...).Set(0)
	if r.coveredByTraffic(t, view) {
		r.Metrics.ProbesSkipped.WithLabelValues(labels...).Inc()
		return
	}
	open := strings.Contains(view.Annotations[circuit.Annotation], circuit.EntryKey(t.Webhook))
	if recovering := r.recovering[t.Key()]; recovering != nil {
		recovering.Store(open)
	}
	// After an Unknown the probe looks for the guard's own recovery: a
	// starved guard's probes time out, each timeout drops its connection,
	// and unbudgeted re-dials would keep it starved (at a thousand
	// targets it never caught up). A target with a failure counted is
	// never budgeted, so an opening never waits for the budget.
	st, _ := r.State.Get(t.Key())
	pathDone := r.startPathProbe(ctx, t, obj, view, wh)
	res, diagnosis := r.probe(ctx, t, obj, wh, st.RecoveryProbe(open))
	if errors.Is(res.Err, probe.ErrRecoveryDialBudget) {
		// Not sent: nothing is known about the webhook, and nothing
		// counts, not even an Unknown.
		pathDone()
		return
	}
	counts := r.State.Observe(t.Key(), res, r.Clock.Now())
	r.reportUnknown(ctx, t, obj, view, counts, res)
	path := pathDone()
	holdChanged := r.noteHold(ctx, t, obj)
	if diagnosis != "" && counts.Failures == 1 {
		// Once per run of failures, not once per probe.
		logf.FromContext(ctx).Info("TLS probe failure diagnosed", "diagnosis", diagnosis)
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "ProbeTLSFailure", "Probe", "%s: %s", t.Webhook, diagnosis)
	}
	r.judgeObserved(ctx, t, obj)
	pathMayOpen := path.Last.Outcome == probe.OutcomeFailed && path.Failures >= t.OpenAfter
	if view.Annotations[circuit.Annotation] == "" && !holdChanged && !pathMayOpen && (res.Outcome != probe.OutcomeFailed || counts.Failures < decide.ArmAheadAt(t)) {
		// The common case, skipped because it runs for every target every
		// interval: with no circuit open in the configuration there is
		// nothing to close, and this probe cannot have opened one below its
		// threshold, nor armed marking ahead of it (an apiserver observation
		// wakes the reconciler itself).
		// Only the end of a hold could release other openings.
		return
	}
	opening, closing, due := decide.Due(r.snapshot(t.Kind, view), r.inputs(t.Kind, view))
	if closing && !opening {
		// Count what was admitted without the webhook up to the close. An
		// opening does not wait for that read of /metrics, which the
		// outage may be slowing: its closing neighbour's Event may then
		// miss the last interval's count.
		r.refreshAdmitted(ctx, t.Kind, view)
	}
	if due {
		r.trigger(ctx, t.Kind, obj)
	}
}

// probeable reads t's configuration, its view and t's webhook, and
// reports why t cannot be probed now (missing, handed over, unprobeable);
// the webhook is nil then.
func (r *ProbeRunner) probeable(ctx context.Context, t config.Target) (client.Object, *circuit.ConfigView, *admissionregistrationv1.MutatingWebhook) {
	log := logf.FromContext(ctx)
	obj := t.Kind.New()
	// The cache's own object, not a copy: it is only read here, and a copy
	// per probe was a large part of the guard's CPU and garbage at a
	// thousand targets.
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: t.Configuration}, obj, &client.GetOptions{UnsafeDisableDeepCopy: ptr.To(true)}); err != nil {
		if apierrors.IsNotFound(err) {
			r.problem(ctx, t, nil, false, t.Kind.ObjectKind()+" not found; it will be picked up when it appears")
			return nil, nil, nil
		}
		log.Error(err, "Reading the target configuration failed; nothing counted")
		return nil, nil, nil
	}
	view, err := circuit.ReadView(obj)
	if err != nil {
		log.Error(err, "Reading the target configuration failed; nothing counted")
		return nil, nil, nil
	}
	wh := circuit.FindWebhook(view, t.Webhook)
	if wh == nil {
		r.problem(ctx, t, obj, false, "webhook not found in the configuration; it will be picked up when it appears")
		return nil, nil, nil
	}
	if obj.GetAnnotations()[circuit.OverrideAnnotation] != "" {
		// Handed over: nothing is counted, so the hand-back starts from zero.
		r.noteRoad(t, nil)
		r.State.SetProblem(t.Key(), "handed over to its administrators by the override annotation", false)
		return nil, nil, nil
	}
	if t.Probe.Kind == config.ProbeAdmissionReview {
		if err := probe.AdmissionReviewProbeable(*wh); err != nil {
			r.problem(ctx, t, obj, true, fmt.Sprintf("%v; configure an HTTPGet probe. While it cannot be probed its circuit does not open, and an open one is closed", err))
			r.judgeObserved(ctx, t, obj)
			r.wake(ctx, t.Kind, obj, view, r.inputs(t.Kind, view))
			return nil, nil, nil
		}
	}
	r.State.SetBackend(t.Key(), decide.Backend(wh))
	r.noteRoad(t, wh)
	return obj, view, wh
}

// probe sends t's probe to wh and counts its outcome in the metrics. A
// TLS failure is diagnosed (DiagnoseTLS), within diagnoseTimeout; the
// diagnosis is returned, and is part of the result's error.
func (r *ProbeRunner) probe(ctx context.Context, t config.Target, obj client.Object, wh *admissionregistrationv1.MutatingWebhook, recovery bool) (probe.Result, string) {
	log := logf.FromContext(ctx)
	labels := []string{string(t.Kind), t.Configuration, t.Webhook}
	res := r.Prober.Probe(ctx, *wh, probe.Spec{
		Kind: probe.Kind(t.Probe.Kind), Timeout: t.Probe.Timeout, Path: t.Probe.Path,
		Validating: t.Kind == circuit.KindValidating, Recovery: recovery,
	})
	if errors.Is(res.Err, probe.ErrRecoveryDialBudget) {
		r.Metrics.RecoveryProbesNotSent.Inc()
		log.V(1).Info("Recovery probe not sent", "reason", res.Err)
		return res, ""
	}
	r.Metrics.ProbeDuration.WithLabelValues(labels...).Observe(res.Duration.Seconds())
	diagnosis := ""
	switch res.Outcome {
	case probe.OutcomeFailed:
		r.Metrics.ProbeFailures.WithLabelValues(append(labels, string(res.Reason))...).Inc()
		if res.Reason == probe.ReasonTLS && r.DiagnoseTLS != nil {
			// A read of the apiserver before the failure is counted:
			// bounded, so that a saturated apiserver delays it by no more.
			diagnoseCtx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
			diagnosis = r.DiagnoseTLS(diagnoseCtx, obj.GetAnnotations())
			cancel()
			if diagnosis != "" {
				res.Err = fmt.Errorf("%w (likely cause: %s)", res.Err, diagnosis)
			}
		}
		log.V(1).Info("Probe failed", "reason", res.Reason, "error", res.Err, "duration", res.Duration)
	case probe.OutcomeUnknown:
		r.Metrics.ProbeUnknown.WithLabelValues(labels...).Inc()
	default:
		log.V(1).Info("Probe healthy", "duration", res.Duration)
	}
	return res, diagnosis
}

// noteHold reports whether the all-fail hold began, ended or ran out its
// bound with this probe, with a log line, an Event on obj and the gauge.
func (r *ProbeRunner) noteHold(ctx context.Context, t config.Target, obj client.Object) bool {
	log := logf.FromContext(ctx)
	holding, expired := r.State.HoldOpen(r.Clock.Now())
	holdChanged := r.holding.Swap(holding) != holding
	if holdChanged {
		r.Metrics.OpeningsHeld.Set(boolGauge(holding))
		switch {
		case holding:
			log.Info("Every probed target is failing at once; holding every opening until one is healthy again, or for at most the hold's bound",
				"boundIntervals", HoldBoundIntervals)
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "OpeningsHeld", "Probe",
				"every webhook webhook-guard probes is failing at once, %s among them: the likely cause is the guard's own network (a NetworkPolicy, DNS, its node), not every webhook; no circuit opens until one target is healthy again, or for at most %d probe intervals", t.Webhook, HoldBoundIntervals)
		case expired:
			log.Info("Every probed target is still failing; the hold ran out its bound and openings go", "boundIntervals", HoldBoundIntervals)
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "OpeningsHoldExpired", "Probe",
				"every webhook webhook-guard probes is still failing, %s among them, %d probe intervals after the first reached its threshold: the circuits open now, since one left closed on a broken webhook refuses every request", t.Webhook, HoldBoundIntervals)
		default:
			log.Info("A probed target is healthy again; openings are no longer held")
		}
	}
	return holdChanged
}

// diagnoseTimeout bounds DiagnoseTLS, the only apiserver request between
// a failed probe and its count.
const diagnoseTimeout = time.Second

// judgeObserved reports the transition t, a target in Observe mode, would
// have made now (State.JudgeObserved), if any: an Event on obj, its
// configuration, webhook_guard_circuit_transitions_total and
// webhook_guard_circuit_would_open. It writes nothing.
func (r *ProbeRunner) judgeObserved(ctx context.Context, t config.Target, obj client.Object) {
	if !t.Observes() {
		return
	}
	c, ok := r.State.JudgeObserved(t, r.Clock.Now())
	if !ok {
		return
	}
	r.Metrics.Transitions.WithLabelValues(string(t.Kind), string(c.Kind)).Inc()
	r.Metrics.WouldOpen.WithLabelValues(string(t.Kind), t.Configuration, t.Webhook).Set(boolGauge(c.Kind == decide.WouldOpen))
	logf.FromContext(ctx).Info("Observe mode: a circuit transition that was not written", "change", c.Kind, "signal", c.Signal)
	r.Recorder.Eventf(obj, nil, eventType(c.Kind), string(c.Kind), "Observe", "%s", c.Message)
}

// reportUnknown logs the first Unknown probe of a run at info level (the
// rest at debug level), and says when an open circuit's probe has been
// Unknown for closeAfter intervals: once with an Event, and with a gauge
// for as long as it lasts.
func (r *ProbeRunner) reportUnknown(ctx context.Context, t config.Target, obj client.Object, view *circuit.ConfigView, counts decide.Counts, res probe.Result) {
	gauge := r.Metrics.UnknownWhileOpen.WithLabelValues(string(t.Kind), t.Configuration, t.Webhook)
	if res.Outcome != probe.OutcomeUnknown {
		gauge.Set(0)
		return
	}
	log := logf.FromContext(ctx)
	if counts.Unknowns == 1 {
		log.Info("Probe could not run; nothing counted", "error", res.Err)
	} else {
		log.V(1).Info("Probe could not run; nothing counted", "error", res.Err, "consecutive", counts.Unknowns)
	}
	rec, err := circuit.Decode(view.Annotations)
	entry, open := rec[t.Webhook]
	if err != nil || !open || !entry.Mine(r.Signer) || !counts.UnknownWhileOpen(t.CloseAfter) {
		gauge.Set(0)
		return
	}
	gauge.Set(1)
	if counts.Unknowns != t.CloseAfter {
		return
	}
	rule := "it stays open until the probe can run again"
	if t.APIServerSignal.Enabled && t.Mode == circuit.ModeIgnore {
		rule = fmt.Sprintf("it closes once %d apiserver observations in a row see the webhook's calls succeed, and stays open otherwise", t.CloseAfter)
	}
	log.Info("Open circuit's probe has been Unknown for closeAfter intervals", "intervals", counts.Unknowns, "error", res.Err)
	r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "ProbeUnknownWhileOpen", "Probe", "%s", circuit.EventNote(
		"%s: the circuit is open and its probe could not run for %d intervals in a row (%v); %s", t.Webhook, counts.Unknowns, res.Err, rule))
}

// inputs are what Plan decides from for view, a configuration of kind.
func (r *ProbeRunner) inputs(kind circuit.Kind, view *circuit.ConfigView) decide.Inputs {
	r.indexOnce.Do(func() {
		r.byConfiguration = map[configurationKey][]config.Target{}
		for _, t := range r.Targets {
			k := configurationKey{t.Kind, t.Configuration}
			r.byConfiguration[k] = append(r.byConfiguration[k], t)
		}
	})
	return r.State.Inputs(r.byConfiguration[configurationKey{kind, view.Name}], r.Clock.Now(), r.Signer, Generation(view))
}

// wake triggers a reconcile of obj (whose circuit.View is view) when the
// evidence in could change its step (decide.Due).
func (r *ProbeRunner) wake(ctx context.Context, kind circuit.Kind, obj client.Object, view *circuit.ConfigView, in decide.Inputs) {
	if _, _, due := decide.Due(r.snapshot(kind, view), in); due {
		r.trigger(ctx, kind, obj)
	}
}

// trigger queues a reconcile of obj's configuration.
func (r *ProbeRunner) trigger(ctx context.Context, kind circuit.Kind, obj client.Object) {
	select {
	case r.Triggers[kind] <- event.GenericEvent{Object: obj}:
	case <-ctx.Done():
	}
}

// problem records why t is not probed: it is missing (obj, its
// configuration, is nil when that is missing too) or it exists but cannot
// be probed (unprobeable).
func (r *ProbeRunner) problem(ctx context.Context, t config.Target, obj client.Object, unprobeable bool, problem string) {
	reason := "TargetMissing"
	if unprobeable {
		reason = "TargetUnprobeable"
	}
	r.noteRoad(t, nil)
	labels := []string{string(t.Kind), t.Configuration, t.Webhook}
	r.Metrics.TargetMissing.WithLabelValues(labels...).Set(boolGauge(!unprobeable))
	r.Metrics.TargetUnprobeable.WithLabelValues(labels...).Set(boolGauge(unprobeable))
	if !r.State.SetProblem(t.Key(), problem, unprobeable) {
		return
	}
	logf.FromContext(ctx).Info("Target is not probed", "problem", problem)
	if obj != nil {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Probe", "%s: %s", t.Webhook, problem)
	}
}
