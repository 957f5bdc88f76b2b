package status

// How GET /status is served to "guard status", and to nobody else.
//
// The guard serves /status on the metrics server (HTTPS), behind the same
// filter as /metrics: controller-runtime's
// filters.WithAuthenticationAndAuthorization, a TokenReview and then a
// SubjectAccessReview for verb get on the non-resource URL /status.
//
// "guard status" finds the leader from its Lease (LeaseName) and reaches
// its pod's port MetricsPort through kube-apiserver's pods proxy, and
// kube-apiserver deletes the Authorization header once it has
// authenticated the caller (k8s.io/apiserver, endpoints/filters
// WithAuthentication), so the person's own credentials, token or client
// certificate, never reach the pod. "guard status" therefore requests a
// token of its own with the TokenRequest API, for the ServiceAccount
// ReaderServiceAccount and the audience Audience, and sends it in
// TokenHeader, which the apiserver forwards. WithCredentials moves it into
// Authorization before the filter runs.
const (
	// Path is the path of the probe counts.
	Path = "/status"
	// ReaderServiceAccount is the ServiceAccount, in the installation's
	// namespace, whose tokens read /status. No pod runs as it
	// (deploy/kustomize/base/rbac/status_role.yaml).
	ReaderServiceAccount = "webhook-guard-status-reader"
	// Audience is the only audience /status accepts, and the one "guard
	// status" requests. kube-apiserver accepts no token of this audience,
	// so a leaked status token reads /status and nothing else; and a
	// token of any other audience (a pod's, a kubeconfig's) cannot read
	// /status, whatever RBAC grants its owner.
	Audience = "webhook-guard.io/status"
	// TokenHeader carries the token through the apiserver's pods proxy,
	// which deletes Authorization.
	TokenHeader = "X-Webhook-Guard-Status-Token"
	// TokenSeconds is how long a token "guard status" requests lives: the
	// least the TokenRequest API grants.
	TokenSeconds = 600
	// MetricsPort names the container port of the metrics server, which
	// serves GET /status too (deploy/kustomize/base/deployment.yaml).
	MetricsPort = "metrics"
	// LegacyPort named the container port of the plain, unauthenticated
	// /status of installations before /status moved to the metrics server.
	LegacyPort = "status"
)

// LeaderElectionID names the leader-election Lease of the default
// instance. Keep it stable across versions so that an upgrade hands over
// to the new leader.
const LeaderElectionID = "webhook-guard.webhook-guard.io"

// LeaseName is the name of an installation's leader-election Lease:
// LeaderElectionID, prefixed by a named instance.
func LeaseName(instance string) string {
	if instance == "" {
		return LeaderElectionID
	}
	return instance + "." + LeaderElectionID
}

// Row is one target in /status and in "guard status". The leader fills
// the probe counts and, for a target in Observe mode, what the breaker
// would have done (WouldOpenSince, WouldOpenSignal, WouldClosedAt); "guard
// status" adds what the objects say (State, Mode, Since, OpenedBy, Owner,
// Original).
type Row struct {
	Kind          string `json:"kind"`
	Configuration string `json:"configuration"`
	Webhook       string `json:"webhook"`
	State         string `json:"state,omitempty"`
	Mode          string `json:"mode,omitempty"`
	Since         string `json:"since,omitempty"`
	LastResult    string `json:"lastResult,omitempty"`
	LastProbe     string `json:"lastProbe,omitempty"`
	Failures      int    `json:"consecutiveFailures"`
	Successes     int    `json:"consecutiveSuccesses"`
	Problem       string `json:"problem,omitempty"`
	// OpenedBy is the signal that opened the circuit, from the record.
	OpenedBy string `json:"openedBy,omitempty"`
	// Owner is the breaker identity that signed the open circuit's entry
	// (circuit.Entry.By): only that installation closes it. Empty for an
	// entry written before entries were signed.
	Owner string `json:"owner,omitempty"`
	// Original is, for a circuit handed to its administrators, what the
	// breaker's entry said before the handoff removed it: the original
	// failurePolicy, the mode and when it opened (decide.HandOffOriginal).
	Original string `json:"original,omitempty"`
	// The apiserver signal: its last observation, its consecutive failing
	// observations, the requests admitted without the webhook while open,
	// and which signal fails while the other is healthy.
	APIServerLast     string  `json:"apiserverLastResult,omitempty"`
	APIServerFailures int     `json:"apiserverConsecutiveFailures"`
	Admitted          float64 `json:"admittedWithoutWebhook"`
	Marked            float64 `json:"markedObjects"`
	Disagree          string  `json:"signalsDisagree,omitempty"`
	// The path probe (kube-apiserver's road, through its service proxy):
	// its last result and its consecutive results, while it runs.
	PathLast      string `json:"pathProbeLastResult,omitempty"`
	PathFailures  int    `json:"pathProbeConsecutiveFailures,omitempty"`
	PathSuccesses int    `json:"pathProbeConsecutiveSuccesses,omitempty"`
	// Marking says why objects admitted while the circuit is open are not
	// marked, when they are not.
	Marking string `json:"marking,omitempty"`
	// Flap damping, from the leader's memory: the circuit's re-openings in
	// a row, each soon after its last close, and how long after its last
	// opening it stays open at least because of them (a Go duration;
	// empty when it is not damped).
	Reopenings int    `json:"reopenings,omitempty"`
	DampedFor  string `json:"dampedFor,omitempty"`
	// For a target in Observe mode, from the leader's memory (there is no
	// record): since when its circuit would be open (RFC 3339; empty while
	// it would be closed), the signal that would have opened it, and when
	// it last would have closed. State is then WouldOpen while it would be
	// open; Since and OpenedBy keep their meaning, the record's, and stay
	// empty.
	WouldOpenSince  string `json:"wouldOpenSince,omitempty"`
	WouldOpenSignal string `json:"wouldOpenSignal,omitempty"`
	WouldClosedAt   string `json:"wouldClosedAt,omitempty"`
}

// StateWouldOpen is the State of a target in Observe mode whose circuit
// would be open: the breaker wrote nothing.
const StateWouldOpen = "WouldOpen"
