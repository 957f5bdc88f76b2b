package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// otherTargetConfig is a GuardConfiguration whose only target is some
// other configuration: the setup's own target has been removed.
const otherTargetConfig = `apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
apiserverScrapeInterval: 1s
targets:
- configuration: some-other-configuration
  webhook: other.webhook-guard.io
  allowAdmissionWithoutMutation: true
  probe:
    interval: 100ms
`

func (s *breakerSetup) startGuardWith(name, cfg string, extra ...string) *harness.Guard {
	s.t.Helper()
	g, err := env.StartGuard(harness.GuardOptions{
		Name: name, Kubeconfig: s.guardID.KubeconfigPath, Config: cfg,
		Args: append([]string{"--leader-elect", "--leader-election-namespace", s.ns}, extra...),
	})
	require.NoError(s.t, err)
	s.t.Cleanup(func() {
		g.Stop()
		if s.t.Failed() {
			s.t.Logf("guard %s logs:\n%s", g.Name, g.Logs())
		}
	})
	return g
}

// setWriteTargets sets the configuration names the guard's ClusterRole (see
// harness.GrantGuard) may update, as make manifests would after a change of
// targets.
func setWriteTargets(t *testing.T, ns string, names ...string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "guard-" + ns}, role))
	for i := range role.Rules {
		if len(role.Rules[i].ResourceNames) > 0 && slices.Contains(role.Rules[i].Verbs, "patch") && slices.Contains(role.Rules[i].Resources, "mutatingwebhookconfigurations") {
			role.Rules[i].ResourceNames = names
		}
	}
	require.NoError(t, env.Client.Update(ctx, role))
}

// withOtherTarget is the setup's configuration with a second target, the
// webhook other of the same configuration, and holdWhenAllFail set.
func (s *breakerSetup) withOtherTarget(other string, holdWhenAllFail int) string {
	return strings.Replace(s.config(""), "targets:\n", fmt.Sprintf(`holdWhenAllFail: %d
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: Bypass
  openAfter: 2
  probe:
    interval: 100ms
    timeout: 250ms
`, holdWhenAllFail, s.name, other), 1)
}

// openThenStop opens the setup's circuit with a guard on its configuration,
// then stops that guard, leaving the circuit open.
func (s *breakerSetup) openThenStop() {
	s.t.Helper()
	g := s.startGuard("old")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	s.waitOpen()
	g.Stop()
}

// eventNotes returns the notes of the events.k8s.io Events in kube-system (circuit.EventsNamespace)
// about the configuration of kind named name, by reason.
func eventNotes(t *testing.T, kind circuit.Kind, name string) map[string]string {
	t.Helper()
	list, err := env.Clientset.EventsV1().Events(circuit.EventsNamespace).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	notes := map[string]string{}
	for _, e := range list.Items {
		if e.Regarding.Kind == kind.ObjectKind() && e.Regarding.Name == name {
			notes[e.Reason] = e.Note
		}
	}
	return notes
}

// Defect 1: a target removed from the configuration while its circuit is
// open. guard status lists the orphaned record, and a guard that may still
// write the configuration closes it, restoring the original.
func TestHardening_removedTargetWhileOpenIsClosed(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	s.openThenStop()

	// guard status, from the new configuration, names the orphan.
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	cfgPath := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(otherTargetConfig), 0o600))
	out, err := exec.Command(bin, "status", "--config", cfgPath, "--kubeconfig", env.KubeconfigPath, "--endpoint", "").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "no longer targets")
	assert.Contains(t, string(out), "Mutating "+s.name+" "+s.hook+" (opened by "+s.guardID.Username+")")

	// The webhook is still slow: only the target's removal can close it.
	// The new RBAC still lets the service write the old configuration.
	setWriteTargets(t, s.ns, s.name, "some-other-configuration")
	s.startGuardWith("new", otherTargetConfig)
	s.waitRestored()
	require.Eventually(t, func() bool {
		return strings.Contains(eventNotes(t, circuit.KindMutating, s.name)["CircuitClosed"], "no longer a target")
	}, transition, 100*time.Millisecond, "no CircuitClosed Event saying why")
}

// Defect 1, the other way out: without the RBAC to close the orphan, the
// service refuses to start and prints the command that closes it. Run as
// printed, by an administrator, it restores the original, and the
// service then starts.
func TestHardening_removedTargetWithoutRBACRefusesToStart(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	s.openThenStop()
	// make manifests renders the new RBAC: the old configuration is gone.
	setWriteTargets(t, s.ns, "some-other-configuration")

	ng := s.startGuardWith("new", otherTargetConfig)
	code, err := ng.Wait(transition)
	require.NoError(t, err, "the guard kept running")
	assert.NotZero(t, code)
	logs := ng.Logs()
	assert.Contains(t, logs, "mutatingwebhookconfiguration "+s.name+" (webhooks "+s.hook)
	assert.True(t, isOpen(s.get(), s.hook, s.mode), "nothing was changed")

	command := printedPatch(t, logs, "mutatingwebhookconfiguration "+s.name)
	sh := exec.Command("sh", "-c", command)
	sh.Env = append(os.Environ(), "KUBECONFIG="+env.KubeconfigPath, "PATH="+env.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := sh.CombinedOutput()
	require.NoError(t, err, "the printed command fails: %s\n%s", command, out)
	s.waitRestored()

	again := s.startGuardWith("again", otherTargetConfig)
	require.Eventually(t, func() bool { return strings.Contains(again.Logs(), "Starting webhook-guard") }, transition, 100*time.Millisecond,
		"the guard does not start after the printed command ran: %s", again.Logs())
	_, err = again.Wait(2 * time.Second)
	require.Error(t, err, "the guard exited: %s", again.Logs())
}

// printedPatch finds, in a guard's output, the commands it printed for
// configuration (its kind and name), as a shell would read them: the
// "kubectl patch" up to the end of its single-quoted patch, and the
// "kubectl annotate" that removes the override.
func printedPatch(t *testing.T, logs, configuration string) string {
	t.Helper()
	start := strings.Index(logs, "kubectl patch "+configuration+" --type=json -p '")
	require.GreaterOrEqual(t, start, 0, "no command printed for %s: %s", configuration, logs)
	rest := logs[start:]
	open := strings.Index(rest, "'")
	for i := open + 1; i < len(rest); i++ {
		if rest[i] != '\'' {
			continue
		}
		if strings.HasPrefix(rest[i:], `'\''`) {
			i += 3
			continue
		}
		const removeOverride = " && kubectl annotate "
		tail := rest[i+1:]
		require.True(t, strings.HasPrefix(tail, removeOverride+configuration+" "+circuit.OverrideAnnotation+"-"), "no removal of the override follows the patch: %s", tail)
		return rest[:i+1] + removeOverride + configuration + " " + circuit.OverrideAnnotation + "-"
	}
	require.Fail(t, "the printed patch is not closed", rest)
	return ""
}

// Defect 4: admissionReviewVersions changed while the circuit is open, so
// that the target can no longer be probed with an AdmissionReview (v1
// allows only sideEffects None and NoneOnDryRun, so this is the change
// that can happen). Nothing could close it: the breaker closes it at once
// and says why.
func TestHardening_unprobeableWhileOpenIsClosed(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	s.startGuard("guard")
	s.waitPolicyEnforced()
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	s.waitOpen()

	// Its rules now match only DELETE: no request an AdmissionReview probe
	// can send (a CREATE) matches them.
	mwc := s.get()
	findWebhook(mwc, s.hook).Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
	require.NoError(t, env.Client.Update(ctx, mwc), "rules are not an owned field")
	s.original.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
	s.waitRestored()
	require.Eventually(t, func() bool {
		return strings.Contains(eventNotes(t, circuit.KindMutating, s.name)["CircuitClosed"], "can no longer be probed")
	}, transition, 100*time.Millisecond, "no CircuitClosed Event saying why")
}

// Defect 5: a record nobody can read. Nothing is guessed and it is
// reported; the override still hands the configuration over.
func TestHardening_unreadableRecordIsReportedAndOverrideWorks(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	// The breaker's own identity writes garbage, as a buggy or older
	// version could have: the guard lets only it write the record.
	mwc := s.get()
	before := mwc.DeepCopy()
	w := findWebhook(mwc, s.hook)
	w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	w.MatchConditions = append(w.MatchConditions, admissionregistrationv1.MatchCondition{Name: circuit.BypassCondition, Expression: "false"})
	mwc.Annotations = map[string]string{circuit.Annotation: `{"` + s.hook + `":{garbage`}
	require.NoError(t, s.guardID.Client.Patch(ctx, mwc, client.MergeFrom(before)))

	metricsAddr := freeAddr(t)
	s.startGuard("guard", "--metrics-bind-address", metricsAddr)
	reader := metricsReader(t, s.ns)
	require.Eventually(t, func() bool {
		body, err := scrape(metricsAddr, reader)
		return err == nil &&
			metricValue(body, `webhook_guard_record_unreadable{configuration="`+s.name+`",kind="Mutating"}`) == 1 &&
			metricValue(body, `webhook_guard_circuit_open{configuration="`+s.name+`",kind="Mutating",webhook="`+s.hook+`"}`) == 1
	}, transition, 100*time.Millisecond, "the unreadable record and the possibly open circuit were not reported in metrics")
	require.Eventually(t, func() bool {
		_, ok := eventNotes(t, circuit.KindMutating, s.name)["RecordUnreadable"]
		return ok
	}, transition, 100*time.Millisecond, "no RecordUnreadable Event")
	assert.Equal(t, mwc.Annotations[circuit.Annotation], s.get().Annotations[circuit.Annotation], "the record was not touched")

	r := env.Kubectl(ctx, "", nil, "annotate", "mutatingwebhookconfiguration", s.name, circuit.OverrideAnnotation+"=INC-9 fixing the record by hand")
	require.NoError(t, r.Err, r.Stderr)
	require.Eventually(t, func() bool {
		return !hasMarker(findWebhook(s.get(), s.hook))
	}, transition, 100*time.Millisecond, "the override did not hand the configuration over")
	assert.Equal(t, admissionregistrationv1.Ignore, *findWebhook(s.get(), s.hook).FailurePolicy, "failurePolicy stays as it is")
	assert.Equal(t, mwc.Annotations[circuit.Annotation], s.get().Annotations[circuit.Annotation], "the record stays, for the administrator to repair")
	// The administrator removes it, under the override, as the Event says.
	r = env.Kubectl(ctx, "", nil, "annotate", "mutatingwebhookconfiguration", s.name, circuit.Annotation+"-")
	require.NoError(t, r.Err, r.Stderr)
}

// Defect 6: a change the apiserver refuses as invalid (here the bypass
// marker would be a webhook's 65th matchCondition, over the limit of 64)
// is not retried forever and does not hold back the other webhooks of the
// configuration.
func TestHardening_invalidChangeDoesNotBlockTheOthers(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	other := "other." + s.name + ".webhook-guard.io" // its URL refuses connections: always failing
	mwc := s.get()
	w := findWebhook(mwc, s.hook)
	for i := len(w.MatchConditions); i < 64; i++ {
		w.MatchConditions = append(w.MatchConditions, admissionregistrationv1.MatchCondition{Name: fmt.Sprintf("filler-%d", i), Expression: "true"})
	}
	require.NoError(t, env.Client.Update(ctx, mwc))
	s.writes.waitFor(t, mwc.ResourceVersion)
	before := len(s.writes.transitions())

	// Both webhooks fail here; holding openings when all fail would hide
	// what this test is about.
	cfg := s.withOtherTarget(other, 0)
	metricsAddr := freeAddr(t)
	s.startGuardWith("guard", cfg, "--metrics-bind-address", metricsAddr)
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))

	require.Eventually(t, func() bool {
		return isOpen(s.get(), other, "Bypass")
	}, transition, 50*time.Millisecond, "the other webhook's circuit never opened")
	require.Eventually(t, func() bool {
		return strings.Contains(eventNotes(t, circuit.KindMutating, s.name)["WriteRefused"], s.hook)
	}, transition, 100*time.Millisecond, "no WriteRefused Event naming the refused webhook")
	got := s.get()
	assert.Equal(t, admissionregistrationv1.Fail, *findWebhook(got, s.hook).FailurePolicy, "the refused change was not half-made")
	rec := mustRecord(t, got)
	assert.NotContains(t, rec, s.hook)

	// Not retried on every probe: while ten more failed probes go by, the
	// refused write is not tried again, and only the other webhook's open
	// reached the object.
	reader := metricsReader(t, s.ns)
	errorsNow := func() float64 {
		body, err := scrape(metricsAddr, reader)
		require.NoError(t, err)
		return metricValue(body, "\nwebhook_guard_write_errors_total")
	}
	refusals := errorsNow()
	assert.GreaterOrEqual(t, refusals, 1.0)
	probes := s.wh.Calls(webhookPath) - s.wh.APIServerCalls(webhookPath)
	require.Eventually(t, func() bool {
		return s.wh.Calls(webhookPath)-s.wh.APIServerCalls(webhookPath) >= probes+10
	}, transition, 50*time.Millisecond)
	assert.Equal(t, refusals, errorsNow(), "the refused change was tried again")
	assert.Len(t, s.writes.transitions(), before+1, "want exactly the other webhook's open")
}

// Defect 12: every target failing in the same interval points at the
// guard's own network. Openings are held and the suspicion is reported,
// but for a bounded time only: a circuit left closed on a
// broken webhook refuses every request, so after HoldBoundIntervals probe
// intervals the hold gives way, says so, and both circuits open.
func TestHardening_everythingFailingAtOnceHoldsOpeningsForABound(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	other := "other." + s.name + ".webhook-guard.io" // its URL refuses connections: always failing
	cfg := s.withOtherTarget(other, 2)
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	s.startGuardWith("guard", cfg)

	require.Eventually(t, func() bool {
		_, ok := eventNotes(t, circuit.KindMutating, s.name)["OpeningsHeld"]
		return ok
	}, transition, 100*time.Millisecond, "no OpeningsHeld Event")
	require.Eventually(t, func() bool {
		_, ok := eventNotes(t, circuit.KindMutating, s.name)["OpeningsHoldExpired"]
		return ok
	}, transition, 100*time.Millisecond, "the hold never gave way")
	require.Eventually(t, func() bool { return isOpen(s.get(), other, "Bypass") && isOpen(s.get(), s.hook, "Bypass") }, transition, 50*time.Millisecond,
		"the failing webhooks did not open once the hold had expired")
}

// Defect 2: a rollout that adds a target. Two replicas run the old
// configuration, two come up on the new one, as a rolling update with
// maxUnavailable 0 would bring them: the new ones must become ready while
// the old leader's policy stands, and the old leader does not fight them.
// When the old ones go, a new one leads and puts the new policy in place.
func TestHardening_rolloutAddingATargetCompletes(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	added := s.name + "-added"
	addedHook := "slow." + added + ".webhook-guard.io"
	w := configMapWebhook(addedHook, s.ns, s.wh.URL(webhookPath), s.wh.CA.CertPEM, admissionregistrationv1.Fail)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: added}, Webhooks: []admissionregistrationv1.MutatingWebhook{w}}
	require.NoError(t, env.Client.Create(ctx, mwc))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), mwc) })
	setWriteTargets(t, s.ns, s.name, added)

	oldCfg := s.config("")
	newCfg := oldCfg + fmt.Sprintf(`- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: Bypass
  openAfter: 2
  closeAfter: 2
  probe:
    interval: 100ms
    timeout: 250ms
`, added, addedHook)
	oldOpts := admission.Options{BreakerUsername: s.guardID.Username, Managed: map[string][]string{s.name: {s.hook}}}
	newOpts := admission.Options{BreakerUsername: s.guardID.Username, Managed: map[string][]string{s.name: {s.hook}, added: {addedHook}}}

	type replica struct {
		g     *harness.Guard
		ready string
	}
	start := func(name, cfg string) replica {
		addr := freeAddr(t)
		return replica{s.startGuardWith(name, cfg, "--health-probe-bind-address", addr, "--leader-election-lease-duration", "3s",
			"--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms"), "http://" + addr + "/readyz"}
	}
	ready := func(r replica) bool { code, _ := get(t, r.ready); return code == http.StatusOK }

	old := []replica{start("old-a", oldCfg), start("old-b", oldCfg)}
	require.Eventually(t, func() bool {
		return admission.PolicyInPlace(ctx, env.Client, oldOpts) == nil && ready(old[0]) && ready(old[1])
	}, transition, 100*time.Millisecond, "the old replicas never became ready")

	// The installer applies the new targets' policy with the new
	// Deployment (StartGuard does it as the installer would); the old
	// leader only reports it, and every replica stays ready.
	nw := []replica{start("new-a", newCfg), start("new-b", newCfg)}
	require.Eventually(t, func() bool { return ready(nw[0]) && ready(nw[1]) && ready(old[0]) && ready(old[1]) }, transition, 100*time.Millisecond,
		"the replicas were not all ready during the rollout: it would hang")
	assert.NoError(t, admission.PolicyInPlace(ctx, env.Client, newOpts), "the old leader changed the installer's policy")

	// The rollout terminates the old replicas; a new one leads.
	for _, r := range old {
		r.g.Stop()
	}
	require.Eventually(t, func() bool { return admission.PolicyInPlace(ctx, env.Client, newOpts) == nil }, transition, 100*time.Millisecond,
		"the new leader never put the new targets' policy in place")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	require.Eventually(t, func() bool {
		got := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: added}, got))
		return isOpen(s.get(), s.hook, "Bypass") && isOpen(got, addedHook, "Bypass")
	}, transition, 50*time.Millisecond, "the new leader did not guard the added target")
}

// Defect 9: two installations, the main one (no instance name) and a
// canary, on disjoint configurations. Each has its own policy, neither
// repairs the other's, each opens and closes only its own circuit; a third
// on the main one's configuration refuses to start, naming it.
func TestHardening_twoInstallationsKeepToThemselves(t *testing.T) {
	ctx := context.Background()
	main := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	canary := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	const instance = "canary"
	canaryPolicy := admission.PolicyName + "-" + instance
	// What "guard manifests rbac" renders for a named instance: update on
	// its own policy objects.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "guard-policy-" + canary.ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
		ResourceNames: []string{canaryPolicy}, Verbs: []string{"update"},
	}}}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, canary.ns, "webhook-guard"))
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: canaryPolicy}})
		_ = env.Client.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: canaryPolicy}})
	})

	main.startGuard("main")
	canary.startGuardWith("canary", canary.config("instance: "+instance+"\n"))
	policyRVs := func() (string, string) {
		a, b := &admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicy{}
		if env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, a) != nil || env.Client.Get(ctx, client.ObjectKey{Name: canaryPolicy}, b) != nil {
			return "", ""
		}
		return a.ResourceVersion, b.ResourceVersion
	}
	require.Eventually(t, func() bool {
		return admission.PolicyInPlace(ctx, env.Client, admission.Options{BreakerUsername: main.guardID.Username, Managed: map[string][]string{main.name: {main.hook}}}) == nil &&
			admission.PolicyInPlace(ctx, env.Client, admission.Options{BreakerUsername: canary.guardID.Username, Managed: map[string][]string{canary.name: {canary.hook}}, Instance: instance}) == nil
	}, transition, 50*time.Millisecond, "both policies never stood side by side")
	mainRV, canaryRV := policyRVs()

	// Both webhooks fail: each installation opens its own circuit, signed
	// with its own identity, and closes it.
	main.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	canary.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	_, mainOpen := main.waitOpen()
	_, canaryOpen := canary.waitOpen()
	assert.Equal(t, main.guardID.Username, mustRecord(t, mainOpen)[main.hook].By)
	assert.Equal(t, canary.guardID.Username+"/"+instance, mustRecord(t, canaryOpen)[canary.hook].By)
	main.wh.SetBehaviour(webhookPath, harness.Allow())
	canary.wh.SetBehaviour(webhookPath, harness.Allow())
	main.waitRestored()
	canary.waitRestored()
	gotMain, gotCanary := policyRVs()
	assert.Equal(t, mainRV, gotMain, "the main policy was rewritten while both ran: a repair loop")
	assert.Equal(t, canaryRV, gotCanary, "the canary policy was rewritten while both ran: a repair loop")

	// A third installation on the main one's configuration refuses to start.
	clash := main.startGuardWith("clash", main.config("instance: clash\n"))
	code, err := clash.Wait(transition)
	require.NoError(t, err)
	assert.NotZero(t, code)
	assert.Contains(t, clash.Logs(), "another webhook-guard installation manages mutatingwebhookconfiguration "+main.name+" (ValidatingAdmissionPolicy webhook-guard)")
}

// A guard that does not get the CPU it needs (here paused with SIGSTOP,
// as an exhausted cgroup CPU quota pauses every thread) sees its own
// probes run past their deadlines. Those timeouts are the guard's, not the
// webhook's: they are Unknown, and a healthy webhook is never opened.
func TestHardening_aStarvedGuardOpensNothing(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	// A healthy webhook that takes 150 ms of the probe's 250 ms, so that
	// most pauses fall while a probe is in flight.
	s.wh.SetBehaviour(webhookPath, harness.Delayed(150*time.Millisecond, harness.Allow()))
	g := s.startGuard("starved")
	waitHealthyProbes(t, g, 3)
	for range 10 {
		require.NoError(t, g.Signal(syscall.SIGSTOP))
		time.Sleep(600 * time.Millisecond) // the stimulus: 600 ms without CPU, over two probe timeouts
		require.NoError(t, g.Signal(syscall.SIGCONT))
		time.Sleep(150 * time.Millisecond)
	}
	waitHealthyProbes(t, g, 3)
	assert.Zero(t, len(s.writes.modified()), "a healthy webhook was opened because the guard itself was starved")
	assert.True(t, strings.Contains(g.Logs(), "webhook-guard itself did not run"), "the starved probes were not reported as Unknown")
}
