package config

import (
	"fmt"
	"time"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// APIVersion and Kind identify a GuardConfiguration file.
const (
	APIVersion = "config.webhook-guard.io/v1alpha1"
	Kind       = "GuardConfiguration"
)

// Mode is what the breaker does to a webhook while its circuit is open; it
// is the circuit contract's Mode, recorded in every record entry.
type Mode = circuit.Mode

// The modes a target may name.
const (
	ModeIgnore = circuit.ModeIgnore
	ModeBypass = circuit.ModeBypass
	// ModeObserve is the shadow mode: the breaker probes and judges the
	// target as in the other modes, and reports each transition it would
	// have made (Events CircuitWouldOpen and CircuitWouldClose, metrics),
	// but writes nothing to its configuration, and the guard policy does
	// not own its fields (Configuration.Managed leaves it out). It is
	// never recorded in a record entry: nothing opens.
	ModeObserve Mode = "Observe"
)

// ProbeKind names how a target is probed.
type ProbeKind string

const (
	// ProbeAdmissionReview POSTs a dry-run AdmissionReview to the webhook's
	// own path. It needs sideEffects None or NoneOnDryRun.
	ProbeAdmissionReview ProbeKind = "AdmissionReview"
	// ProbeHTTPGet GETs a health path on the webhook's host and port.
	ProbeHTTPGet ProbeKind = "HTTPGet"
)

// MaxInstanceLength keeps webhook-guard-<instance> and the Lease name
// within Kubernetes' name limits.
const MaxInstanceLength = 40

// Defaults applied by Load.
const (
	DefaultMode          = ModeIgnore
	DefaultOpenAfter     = 3
	DefaultCloseAfter    = 5
	DefaultProbeKind     = ProbeAdmissionReview
	DefaultProbeInterval = time.Second
	// MaxProbesInARow bounds openAfter and closeAfter. Up to
	// max(openAfter, closeAfter) probes of one webhook are in flight at
	// once (a hanging webhook holds each until its timeout), so this
	// bounds them too; 20 probes in a row are 2 s of evidence at the
	// shortest interval, 20 s at the default.
	MaxProbesInARow = 20
	// MinProbeInterval is the shortest probe interval accepted: each
	// webhook is probed at most ten times a second.
	MinProbeInterval = 100 * time.Millisecond
	// DefaultHoldWhenAllFail: two webhooks on one backend may well fail
	// together; three or more at once point at the guard's own network.
	DefaultHoldWhenAllFail = 3
	// DefaultAPIServerScrapeInterval keeps reading kube-apiserver's
	// /metrics under 1% of a core of kube-apiserver with 200 CRDs and
	// 1,000 webhook names (0.007 core measured: each read makes it gather
	// every metric it has, about 0.2 s of CPU there; make bench, section
	// scrape).
	DefaultAPIServerScrapeInterval = 30 * time.Second
	// MinAPIServerScrapeInterval is the shortest interval accepted.
	MinAPIServerScrapeInterval = time.Second
	// DefaultMinRequests: fewer calls than this say nothing yet; they are
	// added to the next interval's.
	DefaultMinRequests = 3
	// DefaultFailureRatio: half the apiserver's calls failing is an outage,
	// not a webhook that times out now and then.
	DefaultFailureRatio = 0.5
	// DefaultMinOpen: a Bypass circuit the apiserver signal opened stays
	// open at least this long, doubling while the apiserver's calls keep
	// failing after each close.
	DefaultMinOpen = 30 * time.Second
	// DefaultServicePort is clientConfig.service.port's default, and so a
	// path probe service's.
	DefaultServicePort = 443
)

// WithoutPathProbe is what the apiserver signal does for a webhook whose
// road no path probe can travel: one reached by clientConfig.url.
type WithoutPathProbe string

const (
	// WithoutPathProbeReport (the default): the apiserver's failing calls
	// are reported (SignalsDisagree, webhook_guard_signals_disagree) and
	// open nothing. Only the direct probe opens and closes the circuit.
	WithoutPathProbeReport WithoutPathProbe = "Report"
	// WithoutPathProbeOpen: the apiserver's failing calls alone open the
	// circuit, with no path probe to confirm them. Anyone whose requests
	// make the webhook fail can then open it, and a Bypass circuit so
	// opened closes by trial after MinOpen.
	WithoutPathProbeOpen WithoutPathProbe = "Open"
)

// file is the on-disk form, decoded strictly.
type file struct {
	APIVersion      string       `json:"apiVersion"`
	Kind            string       `json:"kind"`
	HoldWhenAllFail *int         `json:"holdWhenAllFail"`
	Instance        string       `json:"instance"`
	ScrapeInterval  string       `json:"apiserverScrapeInterval"`
	Targets         []fileTarget `json:"targets"`
}

type fileTarget struct {
	Kind                            string     `json:"kind"`
	Configuration                   string     `json:"configuration"`
	Webhook                         string     `json:"webhook"`
	AllowAdmissionWithoutMutation   *bool      `json:"allowAdmissionWithoutMutation"`
	AllowAdmissionWithoutValidation *bool      `json:"allowAdmissionWithoutValidation"`
	Mode                            string     `json:"mode"`
	OpenAfter                       *int       `json:"openAfter"`
	CloseAfter                      *int       `json:"closeAfter"`
	DampFlapping                    *bool      `json:"dampFlapping"`
	Probe                           fileProbe  `json:"probe"`
	APIServerSignal                 fileSignal `json:"apiserverSignal"`
}

type fileSignal struct {
	Enabled          *bool         `json:"enabled"`
	MinRequests      *int          `json:"minRequests"`
	FailureRatio     *float64      `json:"failureRatio"`
	MinOpen          string        `json:"minOpen"`
	PathProbe        filePathProbe `json:"pathProbe"`
	WithoutPathProbe string        `json:"withoutPathProbe"`
	TrafficAsProbe   *bool         `json:"trafficAsProbe"`
}

type filePathProbe struct {
	Service *fileService `json:"service"`
}

type fileService struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Port      *int32 `json:"port"`
}

type fileProbe struct {
	Kind     string `json:"kind"`
	Interval string `json:"interval"`
	Timeout  string `json:"timeout"`
	Path     string `json:"path"`
}

// Configuration is a validated GuardConfiguration with defaults applied.
type Configuration struct {
	// Targets are the approved webhooks, in file order.
	Targets []Target
	// HoldWhenAllFail is how many targets, all failing (or not probed
	// yet) with none healthy, make the breaker open none of them: the
	// likely cause is then the guard's own network, not every webhook at
	// once. It reports it, and opens again once one target is healthy.
	// 0 turns the hold off. Default 3.
	HoldWhenAllFail int
	// Instance names this installation when a cluster runs several (a
	// canary beside the main install): its policy is
	// webhook-guard-<instance>, its Lease and record entries carry it, and
	// it refuses to start on a configuration another instance manages.
	// Empty (the default) is the main installation.
	Instance string
	// APIServerScrapeInterval is how often kube-apiserver's /metrics is
	// read for the apiserver signal, for every target together. Each read
	// costs kube-apiserver a gathering of all its metrics, so the default
	// is long (DefaultAPIServerScrapeInterval); the apiserver signal
	// judges one observation per read, and traffic stands in for a
	// target's probe only when the reads are at least as frequent as its
	// probes. At least 1s.
	APIServerScrapeInterval time.Duration
}

// Target is one approved webhook.
type Target struct {
	// Kind is the kind of its configuration: Mutating (the default) or
	// Validating.
	Kind circuit.Kind
	// Configuration is the webhook configuration's name.
	Configuration string
	// Webhook is the webhook's name inside that configuration.
	Webhook string
	// Mode is applied while the circuit is open. Default Ignore. Under
	// ModeObserve nothing is applied: the breaker only says when it would
	// have opened and closed.
	Mode Mode
	// OpenAfter is the number of consecutive failed probes that opens the
	// circuit. Default 3, at most MaxProbesInARow.
	OpenAfter int
	// CloseAfter is the number of consecutive healthy probes that closes
	// it. Default 5, at most MaxProbesInARow.
	CloseAfter int
	// DampFlapping keeps a circuit that re-opens soon after its last close
	// open longer before it may close again (internal/breaker/decide, damping.go).
	// Default true.
	DampFlapping bool
	// Probe says how the webhook is probed.
	Probe Probe
	// APIServerSignal judges the webhook from kube-apiserver's own record
	// of the calls it makes.
	APIServerSignal APIServerSignal
}

// APIServerSignal is the second health signal of a target: the calls
// kube-apiserver made to the webhook, read from its /metrics once per
// probe interval. It sees what the direct probe cannot: the apiserver's
// own path to the webhook (konnectivity, a firewall).
type APIServerSignal struct {
	// Enabled turns the signal on. Default true.
	Enabled bool
	// MinRequests is the fewest calls judged at once; fewer are added to
	// the next interval's (for up to 10 intervals). Default 3.
	MinRequests int
	// FailureRatio is the share of failed calls (calling_webhook_error
	// and fail-open) that makes an interval failing, in (0, 1]. Default 0.5.
	FailureRatio float64
	// MinOpen is how long a Bypass circuit that the apiserver signal
	// opened without a path probe (WithoutPathProbeOpen, a url webhook)
	// stays open at least. While bypassed the apiserver makes no calls,
	// so only the probe can close it, and the probe cannot see the
	// apiserver's path: each close is a trial. When the apiserver signal
	// opens it again before one healthy observation, the next minimum
	// doubles (at most 32 times MinOpen). A circuit a path probe confirmed
	// closes on the path probe instead, with no minimum. Default 30s.
	MinOpen time.Duration
	// PathProbe names the Service of a service-backed webhook, whose road
	// the path probe travels: a GET through kube-apiserver's service
	// proxy, which dials through the same "cluster" egress as the
	// apiserver's webhook calls. The apiserver's failing calls open a
	// circuit only when the path probe fails too, and such a circuit
	// closes when the path probe succeeds CloseAfter times. The guard
	// always probes the Service the webhook's clientConfig names; this
	// field grants it (guard manifests rbac: get on services/proxy by
	// resourceNames). Unset, or naming another Service, the path probe is
	// Forbidden and Unknown, and the apiserver signal opens nothing.
	PathProbe PathProbe
	// WithoutPathProbe is what the signal does for a webhook reached by
	// clientConfig.url, whose road no path probe can travel. Default
	// Report.
	WithoutPathProbe WithoutPathProbe
	// TrafficAsProbe lets the apiserver's own calls stand in for the
	// direct probe: a closed circuit whose webhook the last scrape showed
	// called, every call answered within the probe's timeout, is not
	// probed until a scrape shows otherwise. Default true.
	TrafficAsProbe bool
}

// PathProbe says which Service the path probe may reach.
type PathProbe struct {
	// Service is the webhook's clientConfig.service; nil when not set.
	Service *Service
}

// Service names a Service port, as clientConfig.service does.
type Service struct {
	// Namespace and Name of the Service.
	Namespace, Name string
	// Port is the Service port the webhook is called on. Default 443.
	Port int32
}

// ProxyName is the name kube-apiserver's RBAC sees for a service proxy
// request to s over HTTPS, "https:<name>:<port>": the resourceName that
// grants the path probe, and the name it requests.
func (s Service) ProxyName() string {
	return fmt.Sprintf("https:%s:%d", s.Name, s.Port)
}

// Key is "kind/configuration/webhook", unique per target: the same names
// in a mutating and a validating configuration are two targets.
func (t Target) Key() string { return string(t.Kind) + "/" + t.Configuration + "/" + t.Webhook }

// Probe says how a target is probed.
type Probe struct {
	// Kind is AdmissionReview (default) or HTTPGet.
	Kind ProbeKind
	// Interval between probes. Default 1s, at least MinProbeInterval.
	Interval time.Duration
	// Timeout of one probe, the slow-call threshold: a call outstanding
	// longer counts as failing. Zero means probe.DefaultSlowCall (4s).
	// Never longer than the webhook's own timeoutSeconds.
	Timeout time.Duration
	// Path is the health path for HTTPGet.
	Path string
}

// Names returns the names of kind's configurations in target order,
// without repeats.
func (c *Configuration) Names(kind circuit.Kind) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range c.Targets {
		if t.Kind == kind && !seen[t.Configuration] {
			seen[t.Configuration] = true
			out = append(out, t.Configuration)
		}
	}
	return out
}

// Observes reports whether t is in ModeObserve: probed and judged, never
// written.
func (t Target) Observes() bool { return t.Mode == ModeObserve }

// Managed maps each of kind's configuration names to its target webhook
// names: the fields the guard policy owns. Targets in ModeObserve are left
// out, since the breaker never writes them; a configuration whose targets
// all observe is not managed at all, and anyone may change it.
func (c *Configuration) Managed(kind circuit.Kind) map[string][]string {
	out := map[string][]string{}
	for _, t := range c.Targets {
		if t.Kind == kind && !t.Observes() {
			out[t.Configuration] = append(out[t.Configuration], t.Webhook)
		}
	}
	return out
}
