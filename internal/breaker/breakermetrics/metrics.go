// Package breakermetrics holds the breaker's Prometheus collectors and
// the fixed values of their labels. Build information and the webhooks'
// timeouts, which are not the breaker's, are package clustermetrics'.
package breakermetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// Metrics are the breaker's Prometheus collectors. Labels are bounded: one
// series per target, or per reason from a fixed set.
type Metrics struct {
	CircuitOpen *TargetGaugeVec
	// WouldOpen is CircuitOpen for targets in Observe mode: 1 while the
	// breaker would have their circuit open, though it wrote nothing.
	WouldOpen     *TargetGaugeVec
	ProbeDuration *prometheus.HistogramVec
	// ProbeLateness is how much later than due probes start: the guard's
	// own delay (CPU starvation, throttling), not the webhooks'.
	ProbeLateness prometheus.Histogram
	ProbeFailures *TargetCounterVec
	ProbeUnknown  *TargetCounterVec
	// ProbesSkipped counts the probes the apiserver's own healthy calls
	// stood in for (apiserverSignal.trafficAsProbe).
	ProbesSkipped     *TargetCounterVec
	UnknownWhileOpen  *TargetGaugeVec
	Transitions       *prometheus.CounterVec
	WriteConflicts    prometheus.Counter
	WriteErrors       prometheus.Counter
	TargetMissing     *TargetGaugeVec
	TargetUnprobeable *TargetGaugeVec
	// Reconciles counts the breaker's reconciles by result: written (one
	// patch was written: transitions or arming entries), unchanged (the
	// step was to change nothing; the probe runner only wakes the
	// reconciler when the evidence could change its step, so these come
	// mostly from watch events), unreadable (the record could not be
	// decoded) and failed.
	Reconciles *prometheus.CounterVec
	// RecordUnreadable is 1 while a configuration's circuit record cannot
	// be decoded; the breaker changes nothing on it until it is repaired or
	// handed over.
	RecordUnreadable *prometheus.GaugeVec
	// OpeningsHeld is 1 while every probed target fails at once and the
	// breaker holds every opening (config holdWhenAllFail).
	OpeningsHeld prometheus.Gauge
	// Openings counts openings by the signal that opened them.
	Openings *TargetCounterVec
	// The apiserver signal: its scrapes, observations, disagreements with
	// the probe, and the requests admitted without an open webhook.
	ScrapeDuration        prometheus.Histogram
	ScrapeBytes           prometheus.Gauge
	ScrapeErrors          *prometheus.CounterVec
	APIServerObservations *TargetCounterVec
	SignalsDisagree       *TargetGaugeVec
	AdmittedWithout       *TargetCounterVec
	// PathProbes counts path probes (kube-apiserver's road to a
	// service-backed webhook, through its service proxy), by target and
	// outcome.
	PathProbes *TargetCounterVec
	// MarkingAvailable is 1 when the apiserver serves
	// MutatingAdmissionPolicy, so objects admitted while a mutating
	// webhook's circuit is open are marked.
	MarkingAvailable prometheus.Gauge
	// MarkingUnconfirmed counts the openings that went without evidence
	// that their marking policy was armed, after waiting for it as long
	// as the breaker allows (the CircuitOpened Event says why).
	MarkingUnconfirmed *prometheus.CounterVec
	// CanaryFailures counts marking canaries that failed or timed out (a
	// failing webhook that intercepts Events refuses them).
	CanaryFailures prometheus.Counter
	// RecoveryProbesNotSent counts recovery probes (of open circuits,
	// and after an Unknown) not sent because they needed a new connection
	// and the second's budget of them was spent
	// (probe.ErrRecoveryDialBudget).
	RecoveryProbesNotSent prometheus.Counter
}

// NewMetrics creates the collectors without registering them.
func NewMetrics() *Metrics {
	target := []string{"kind", "configuration", "webhook"}
	m := &Metrics{
		CircuitOpen: NewTargetGaugeVec("webhook_guard_circuit_open",
			"1 while the breaker's changes are in place on a target webhook.",
			""),
		WouldOpen: NewTargetGaugeVec("webhook_guard_circuit_would_open",
			"1 while the circuit of a target in Observe mode would be open; the breaker wrote nothing (webhook_guard_circuit_open stays 0).",
			""),
		ProbeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "webhook_guard_probe_duration_seconds", Help: "Duration of probes, by target.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, target),
		ProbeLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "webhook_guard_probe_lateness_seconds", Help: "How much later than due probes started, for every target together: the guard's own scheduling delay (CPU starvation or throttling), not the webhooks'.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		ProbeFailures: NewTargetCounterVec("webhook_guard_probe_failures_total",
			"Failed probes, by target and reason.",
			"reason"),
		ProbeUnknown: NewTargetCounterVec("webhook_guard_probe_unknown_total",
			"Probes that could not run for reasons on the guard's side; they count for nothing.",
			""),
		ProbesSkipped: NewTargetCounterVec("webhook_guard_probes_skipped_total",
			"Direct probes not sent because kube-apiserver's own calls to the webhook, in its last scrape, all answered in time (apiserverSignal.trafficAsProbe).",
			""),
		UnknownWhileOpen: NewTargetGaugeVec("webhook_guard_probe_unknown_while_open",
			"1 while an open circuit's probe has said Unknown for closeAfter intervals in a row: the circuit closes only when closeAfter apiserver observations in a row see the webhook's calls succeed (Ignore mode), and otherwise stays open.",
			""),
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_guard_circuit_transitions_total", Help: "Changes the breaker wrote, by configuration kind and change (to). kind=\"Validating\",to=\"CircuitOpened\" counts openings that admit requests without validation. to=\"CircuitWouldOpen\" and to=\"CircuitWouldClose\" count the changes it would have written to targets in Observe mode, where it writes nothing.",
		}, []string{"kind", "to"}),
		WriteConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_guard_write_conflicts_total", Help: "Updates refused for a stale resourceVersion; each was re-read and decided again.",
		}),
		WriteErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_guard_write_errors_total", Help: "Updates that failed for a reason other than a conflict.",
		}),
		TargetMissing: NewTargetGaugeVec("webhook_guard_target_missing",
			"1 while a target's configuration or webhook does not exist.",
			""),
		TargetUnprobeable: NewTargetGaugeVec("webhook_guard_target_unprobeable",
			"1 while a target cannot be probed safely (e.g. AdmissionReview probe on sideEffects Some/Unknown); it is never opened.",
			""),
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_guard_reconciles_total", Help: "Reconciles of target configurations, by result (written: a patch of transitions or of arming entries; unchanged, unreadable, failed).",
		}, []string{"result"}),
		RecordUnreadable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "webhook_guard_record_unreadable", Help: "1 while a configuration's circuit record cannot be decoded; nothing is changed on it until it is repaired or handed over with the override annotation.",
		}, []string{"kind", "configuration"}),
		OpeningsHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "webhook_guard_openings_held", Help: "1 while every probed target is failing at once: the likely cause is the guard's own network, so no circuit is opened until one target is healthy again.",
		}),
		Openings: NewTargetCounterVec("webhook_guard_circuit_openings_total",
			"Circuits opened, by target and the signal that opened them (probe, apiserver, probe+apiserver, road).",
			"signal"),
	}
	m.addSignalMetrics(target)
	return m
}

// addSignalMetrics adds the metrics of the apiserver signal, marking and
// the path probe.
func (m *Metrics) addSignalMetrics(target []string) {
	m.ScrapeDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "webhook_guard_apiserver_scrape_duration_seconds", Help: "Duration of one read and parse of kube-apiserver's /metrics, for every target together.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})
	m.ScrapeBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "webhook_guard_apiserver_scrape_bytes", Help: "Size of the last response read from kube-apiserver's /metrics.",
	})
	m.ScrapeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "webhook_guard_apiserver_scrape_errors_total", Help: "Failed reads of kube-apiserver's /metrics, by kind (forbidden: RBAC get on /metrics is missing; error: anything else). The apiserver signal is Unknown meanwhile.",
	}, []string{"reason"})
	m.APIServerObservations = NewTargetCounterVec("webhook_guard_apiserver_observations_total",
		"Apiserver signal observations, by target and verdict (Healthy, Failing, Unknown).",
		"verdict")
	m.SignalsDisagree = NewTargetGaugeVec("webhook_guard_signals_disagree",
		"1 while one signal (failing=apiserver or failing=probe) has failed for several intervals while the other was healthy: the network path of the failing side is broken, not the webhook.",
		"failing")
	m.MarkingAvailable = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "webhook_guard_marking_available", Help: "1 when the apiserver serves MutatingAdmissionPolicy and objects admitted while a mutating webhook's circuit is open are marked (label webhook-guard.io/unmutated); 0 when it does not.",
	})
	m.MarkingUnconfirmed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "webhook_guard_marking_unconfirmed_total", Help: "Circuits opened without evidence that kube-apiserver marks with their marking policy, after waiting for it as long as the breaker allows (the CircuitOpened Event says why).",
	}, target)
	m.CanaryFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "webhook_guard_marking_canary_failures_total", Help: "Marking canaries (dry-run Event creates) that failed or timed out; a failing webhook that intercepts Events refuses them.",
	})
	m.RecoveryProbesNotSent = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "webhook_guard_recovery_probes_not_sent_total", Help: "Recovery probes (of open circuits, and after an Unknown) not sent because they needed a new connection and the second's budget of new connections for them was spent; they count for nothing.",
	})
	m.PathProbes = NewTargetCounterVec("webhook_guard_path_probes_total",
		"Probes of kube-apiserver's own road to a service-backed webhook, a GET through its service proxy, by target and outcome (Healthy: the webhook's server answered; Failed: the apiserver could not reach it; Unknown: cannot tell). They run while the apiserver's calls fail and while a circuit they opened is open.",
		"outcome")
	m.AdmittedWithout = NewTargetCounterVec("webhook_guard_admitted_without_webhook_total",
		"Requests kube-apiserver admitted without calling the webhook (bypass matchCondition) or after the call failed (Ignore) while its circuit was open, from the apiserver's own counters.",
		"")
}

// Collectors returns every collector, for registration on
// controller-runtime's metrics.Registry.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.CircuitOpen, m.WouldOpen, m.ProbeDuration, m.ProbeLateness, m.ProbeFailures, m.ProbeUnknown, m.ProbesSkipped, m.UnknownWhileOpen, m.Transitions, m.WriteConflicts, m.WriteErrors, m.TargetMissing, m.TargetUnprobeable, m.Reconciles, m.RecordUnreadable, m.OpeningsHeld,
		m.Openings, m.ScrapeDuration, m.ScrapeBytes, m.ScrapeErrors, m.APIServerObservations, m.SignalsDisagree, m.AdmittedWithout, m.MarkingAvailable, m.PathProbes, m.MarkingUnconfirmed, m.CanaryFailures, m.RecoveryProbesNotSent}
}

// The values of webhook_guard_apiserver_scrape_errors_total's reason label.
const (
	// ScrapeForbidden: RBAC get on the non-resource URL /metrics is missing.
	ScrapeForbidden = "forbidden"
	// ScrapeError: any other failure.
	ScrapeError = "error"
)

// The values of webhook_guard_reconciles_total's result label.
const (
	ReconcileWritten    = "written"
	ReconcileUnchanged  = "unchanged"
	ReconcileUnreadable = "unreadable"
	ReconcileFailed     = "failed"
)

// PathOutcomes are the values of webhook_guard_path_probes_total's outcome
// label.
var PathOutcomes = []probe.Outcome{probe.OutcomeHealthy, probe.OutcomeFailed, probe.OutcomeUnknown}

// ProbeFailureReasons are the reason values of
// webhook_guard_probe_failures_total: every probe.FailureReason the prober
// returns (a test checks the list against internal/probe).
var ProbeFailureReasons = []probe.FailureReason{
	probe.ReasonTimeout, probe.ReasonRefused, probe.ReasonTLS,
	probe.ReasonHTTPStatus, probe.ReasonBadResponse, probe.ReasonNoRoute,
}

// ChangeKinds are the to values of webhook_guard_circuit_transitions_total.
var ChangeKinds = []decide.ChangeKind{decide.Opened, decide.Closed, decide.HandedOff, decide.DroppedStale, decide.Overwritten, decide.WouldOpen, decide.WouldClose}

// Signals are the signal values of webhook_guard_circuit_openings_total.
var Signals = []string{decide.SignalProbe, decide.SignalAPIServer, decide.SignalBoth, decide.SignalRoad}

// Verdicts are the verdict values of webhook_guard_apiserver_observations_total.
var Verdicts = []apimetrics.Verdict{apimetrics.Healthy, apimetrics.Failing, apimetrics.Unknown}

// Initialize creates every series of the labelled counters (and of the
// probe duration histogram, whose _count the alerts rate) at 0, for each
// target and each known label value, so that they exist from the start of
// the process. A counter series that first appears at 1 has no earlier
// sample, and increase() and rate() do not see that first event: the first
// opening, failure or scrape error after a restart would go unnoticed.
// Call it once at startup, before the metrics are served.
func (m *Metrics) Initialize(targets []config.Target) {
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		for _, to := range ChangeKinds {
			m.Transitions.WithLabelValues(string(kind), string(to))
		}
	}
	for _, result := range []string{ReconcileWritten, ReconcileUnchanged, ReconcileUnreadable, ReconcileFailed} {
		m.Reconciles.WithLabelValues(result)
	}
	for _, reason := range []string{ScrapeForbidden, ScrapeError} {
		m.ScrapeErrors.WithLabelValues(reason)
	}
	for _, t := range targets {
		target := []string{string(t.Kind), t.Configuration, t.Webhook}
		with := func(v string) []string { return append(append([]string(nil), target...), v) }
		m.ProbeDuration.WithLabelValues(target...)
		m.ProbeUnknown.WithLabelValues(target...)
		m.ProbesSkipped.WithLabelValues(target...)
		m.AdmittedWithout.WithLabelValues(target...)
		if t.Observes() {
			m.WouldOpen.WithLabelValues(target...).Set(0)
		}
		for _, reason := range ProbeFailureReasons {
			m.ProbeFailures.WithLabelValues(with(string(reason))...)
		}
		for _, signal := range Signals {
			m.Openings.WithLabelValues(with(signal)...)
		}
		for _, verdict := range Verdicts {
			m.APIServerObservations.WithLabelValues(with(string(verdict))...)
		}
		for _, outcome := range PathOutcomes {
			m.PathProbes.WithLabelValues(with(string(outcome))...)
		}
	}
}
