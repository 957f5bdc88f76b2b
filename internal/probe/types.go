package probe

import (
	"context"
	"errors"
	"time"
)

// Kind is the kind of probe sent to a webhook.
type Kind string

const (
	// KindAdmissionReview POSTs a synthetic dry-run admission.k8s.io/v1
	// AdmissionReview to the webhook's own path. It is only allowed for
	// webhooks whose sideEffects are None or NoneOnDryRun (see DryRunSafe).
	KindAdmissionReview Kind = "AdmissionReview"
	// KindHTTPGet GETs Spec.Path on the webhook's host, port and TLS config;
	// any 2xx status is healthy.
	KindHTTPGet Kind = "HTTPGet"
)

// Outcome is the overall verdict of one probe.
type Outcome string

const (
	// OutcomeHealthy means the webhook answered the way kube-apiserver
	// requires (for AdmissionReview, allowed:false is healthy too).
	OutcomeHealthy Outcome = "Healthy"
	// OutcomeFailed means kube-apiserver would have failed the same call;
	// Result.Reason says why.
	OutcomeFailed Outcome = "Failed"
	// OutcomeUnknown means the guard could not tell (its own lookup failed,
	// its context ended, or the webhook cannot be probed safely). It must
	// not be counted as a failure.
	OutcomeUnknown Outcome = "Unknown"
)

// FailureReason classifies a failed probe.
type FailureReason string

const (
	// ReasonTimeout means no complete answer arrived within the probe timeout.
	ReasonTimeout FailureReason = "timeout"
	// ReasonRefused means the connection was refused, or the server dropped
	// it (reset / EOF) before a complete response.
	ReasonRefused FailureReason = "refused"
	// ReasonTLS means the TLS handshake or certificate verification failed,
	// including an unusable caBundle.
	ReasonTLS FailureReason = "tls"
	// ReasonHTTPStatus means an HTTP response arrived with an unacceptable
	// status code.
	ReasonHTTPStatus FailureReason = "http-status"
	// ReasonBadResponse means a 200 response whose body is not a valid
	// AdmissionReview answer for the request sent.
	ReasonBadResponse FailureReason = "bad-response"
	// ReasonNoRoute means there is no way to reach the webhook: missing
	// Service or ClusterIP, unreachable host or network, unknown host name,
	// or an unclassifiable network error.
	ReasonNoRoute FailureReason = "no-route"
)

// DefaultTimeout is the probe timeout used when neither Spec.Timeout nor the
// webhook's timeoutSeconds is set (kube-apiserver's default is 10s too).
const DefaultTimeout = 10 * time.Second

// DefaultSlowCall is the probe timeout when Spec.Timeout is zero, unless
// the webhook's timeoutSeconds is shorter: a call outstanding longer than
// this counts as failing, as resilience4j's slowCallDurationThreshold
// does. Waiting out a hanging webhook's whole timeoutSeconds (10 s by
// default, up to 30) per probe would make its circuit open only after
// openAfter such timeouts, while every request it matches waits and is
// refused. 4 s is four times the 1 s probe timeout under which the
// conformance suite's real webhooks open nothing over their healthy phase
// (docs/how-it-works.md, "A hanging webhook"), and with openAfter 3 and a
// 1 s interval a hang opens within 3 to 4 s after the third probe starts:
// 6 to 7 s (measured: 6.95 s, TestBadDay_aHangingWebhookOpensInSeconds).
const DefaultSlowCall = 4 * time.Second

// Result is the outcome of one probe. Probe always returns one.
type Result struct {
	// Outcome is Healthy, Failed or Unknown.
	Outcome Outcome
	// Reason is set when Outcome is Failed.
	Reason FailureReason
	// Err is set when Outcome is Failed or Unknown. Its message is safe to
	// log: it never contains response bodies or credentials.
	Err error
	// Duration is how long the probe took, including Service resolution.
	Duration time.Duration
	// HTTPStatus is the HTTP status code received, when a response arrived.
	HTTPStatus int
	// Slow is set on a timeout failure when the probe gave up at its own
	// timeout, shorter than the webhook's timeoutSeconds: kube-apiserver
	// would still have been waiting, and would have used an answer that
	// came in time. It is not set when the probe waited as long as
	// kube-apiserver does, and never on any other failure.
	Slow bool
}

// Spec says how to probe one webhook.
type Spec struct {
	// Kind is the probe kind; empty means KindAdmissionReview.
	Kind Kind
	// Timeout bounds the whole probe: a call slower than this fails. 0
	// means DefaultSlowCall. It is never longer than the webhook's
	// timeoutSeconds (DefaultTimeout when that is nil).
	Timeout time.Duration
	// Path is the absolute path (optionally with a query) used by HTTPGet
	// probes, e.g. "/healthz". It is ignored for AdmissionReview probes.
	Path string
	// Validating says the webhook is a validating one: its AdmissionReview
	// answer is checked as kube-apiserver checks a validating webhook's
	// (no patch allowed).
	Validating bool
	// Recovery says the probe looks for a recovery, which is not urgent:
	// the webhook's (its circuit is open), or the guard's own (the last
	// probe was Unknown). A new connection it needs takes a token of the
	// Prober's RecoveryDials first; when there is none, the probe is not
	// sent and its Result's error is ErrRecoveryDialBudget.
	Recovery bool
}

// RecoveryDialsPerSecond is the budget of new connections a second for
// recovery probes (Spec.Recovery) that the service runs with (Prober
// .RecoveryDials), and its burst. A TCP and TLS handshake costs the guard
// about 1 ms of CPU (hack/bench), so the budget bounds their cost to about
// a tenth of a core whatever fails. A probe on a kept-alive connection
// needs none, so a recovered webhook, once one probe reached it, closes
// at the usual pace; a thousand recovering at once wait up to ten seconds
// for their first.
const RecoveryDialsPerSecond = 100

// ErrRecoveryDialBudget is the error of a recovery probe (Spec.Recovery)
// that was not sent because it needed a new connection and the Prober's
// RecoveryDials had no token left: the webhook was not asked, so nothing
// is known about it.
var ErrRecoveryDialBudget = errors.New("not sent: it needed a new connection, and this second's budget of new connections for recovery probes (of open circuits, and after an Unknown) is spent")

// Resolver turns a webhook's service reference into an address.
type Resolver interface {
	// Resolve returns host:port for a service reference, or an error. Errors
	// wrapping ErrNoRoute are failures (no-route); any other error is Unknown.
	Resolve(ctx context.Context, namespace, name string, port int32) (string, error)
}

// ErrNoRoute is wrapped by Resolver errors meaning the Service cannot be
// reached by kube-apiserver either (not found, no ClusterIP, no such port).
var ErrNoRoute = errors.New("no route to webhook service")
