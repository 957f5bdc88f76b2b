package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// TestObserve_outageWritesNothingAndReportsWhatWouldHaveHappened: a target
// in Observe mode goes through an outage and a recovery. The guard makes
// no write at all (the configuration is byte-identical as the apiserver
// serves it, at the same resourceVersion), starts without marking
// policies, and claims none of the configuration's fields; yet the
// CircuitWouldOpen Event, webhook_guard_circuit_would_open and
// webhook_guard_circuit_transitions_total{to="CircuitWouldOpen"} come when
// Bypass would have opened (openAfter failed probes), "guard status"
// shows WouldOpen since then, and recovery brings CircuitWouldClose.
func TestObserve_outageWritesNothingAndReportsWhatWouldHaveHappened(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Observe", name: uniqueName(t, "observe")})
	before := rawConfiguration(t, s.name)

	metricsAddr := freeAddr(t)
	g := env.StartGuardT(t, harness.GuardOptions{
		Name: "guard", Kubeconfig: s.guardID.KubeconfigPath, Config: s.config(""),
		// An Observe target never opens, so it marks nothing: the guard
		// starts without the marking policies.
		WithoutMarking: true,
		Args: []string{"--leader-elect", "--leader-election-namespace", s.ns, "--metrics-bind-address", metricsAddr,
			"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms"},
	})
	waitHealthyProbes(t, g, 3)
	// The guard's policy is in place, and manages no configuration: an
	// Observe target's fields are not the breaker's.
	require.Eventually(t, func() bool {
		return admission.PolicyInPlace(ctx, env.Client, admission.Options{BreakerUsername: s.guardID.Username}) == nil
	}, transition, 50*time.Millisecond, "the guard never put its policy, managing nothing, in place")

	reader := metricsReader(t, s.ns)
	series := func(name, labels string) string { return name + "{" + labels + "}" }
	target := fmt.Sprintf(`configuration="%s",kind="Mutating",webhook="%s"`, s.name, s.hook)
	wouldOpen := series("webhook_guard_circuit_would_open", target)
	open := series("webhook_guard_circuit_open", target)
	transitions := func(to decide.ChangeKind) string {
		return series("webhook_guard_circuit_transitions_total", `kind="Mutating",to="`+string(to)+`"`)
	}

	// The outage.
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	var note string
	require.Eventually(t, func() bool {
		note = eventNotes(t, circuit.KindMutating, s.name)[string(decide.WouldOpen)]
		return note != ""
	}, transition, 50*time.Millisecond, "no CircuitWouldOpen Event on the configuration")
	t.Logf("CircuitWouldOpen: %s", note)
	// openAfter is 2, as for the Bypass circuit it would have been.
	assert.Contains(t, note, "would have opened the circuit on "+s.hook+" after 2 consecutive failed probes (last: timeout")
	assert.Contains(t, note, "mode Observe: webhook-guard changed nothing")
	var body string
	var err error
	require.Eventually(t, func() bool {
		body, err = scrape(metricsAddr, reader)
		return err == nil && metricValue(body, wouldOpen) == 1 && metricValue(body, transitions(decide.WouldOpen)) == 1
	}, transition, 100*time.Millisecond, "webhook_guard_circuit_would_open and the CircuitWouldOpen transition were not reported")
	assert.Zero(t, metricValue(body, open), "webhook_guard_circuit_open stays 0: nothing opened")
	assert.Zero(t, metricValue(body, transitions(decide.Opened)))

	status := s.status(g)
	t.Logf("$ guard status --config guard.yaml\n%s", status)
	row := statusLine(t, status, s.hook)
	assert.Equal(t, []string{s.name, s.hook, "WouldOpen", "Observe"}, row[:4], status)
	since, err := time.Parse(time.RFC3339, row[4])
	require.NoError(t, err, "SINCE is when it would have opened: %s", status)
	assert.WithinDuration(t, time.Now(), since, transition)
	assert.Equal(t, decide.SignalProbe, row[6], "OPENED BY is the signal that would have opened it")

	// The recovery.
	s.wh.SetBehaviour(webhookPath, harness.Allow())
	require.Eventually(t, func() bool {
		note = eventNotes(t, circuit.KindMutating, s.name)[string(decide.WouldClose)]
		return note != ""
	}, transition, 50*time.Millisecond, "no CircuitWouldClose Event on the configuration")
	t.Logf("CircuitWouldClose: %s", note)
	assert.Contains(t, note, "would have closed the circuit on "+s.hook+" after 2 consecutive healthy probes")
	require.Eventually(t, func() bool {
		body, err = scrape(metricsAddr, reader)
		return err == nil && metricValue(body, transitions(decide.WouldClose)) == 1
	}, transition, 100*time.Millisecond, "the CircuitWouldClose transition was not counted")
	assert.Zero(t, metricValue(body, wouldOpen))
	row = statusLine(t, s.status(g), s.hook)
	assert.Equal(t, []string{s.name, s.hook, "Closed", "Observe"}, row[:4])

	// No write at all: the same bytes at the same resourceVersion, and no
	// MODIFIED event on the watch started before the guard.
	waitHealthyProbes(t, g, 3)
	after := rawConfiguration(t, s.name)
	assert.JSONEq(t, string(before), string(after), "the configuration changed under Observe")
	assert.Equal(t, string(before), string(after), "the configuration is not byte-identical")
	assert.Empty(t, s.writes.modified(), "the guard wrote to the configuration under Observe")

	// Nobody's change of its failurePolicy is refused: the guard claims
	// none of an Observe target's fields.
	mwc := s.get()
	findWebhook(mwc, s.hook).FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	require.NoError(t, env.Client.Update(ctx, mwc), "an administrator's change of an Observe target's failurePolicy was refused")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: s.name}, mwc))
	assert.Equal(t, admissionregistrationv1.Ignore, *findWebhook(mwc, s.hook).FailurePolicy)
}

// rawConfiguration is the MutatingWebhookConfiguration name as the
// apiserver serves it, byte for byte.
func rawConfiguration(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := env.Clientset.AdmissionregistrationV1().RESTClient().Get().
		AbsPath("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", name).DoRaw(context.Background())
	require.NoError(t, err)
	return raw
}
