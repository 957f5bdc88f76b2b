package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// deleteGuardPolicy is the command the refusals print for the default
// installation's policy.
const deleteGuardPolicy = "kubectl delete validatingadmissionpolicy,validatingadmissionpolicybinding " + admission.PolicyName

// Two installations without an instance name, under different
// ServiceAccounts, would share the guard policy webhook-guard, which
// exempts one breaker only. While the first runs and its policy stands,
// the second refuses to start, naming it and the remedies, and writes
// nothing. (An installer that applies the second's policy over the
// first's is reported by the first: TestGuard_reportsALoosenedOrMissingPolicyAndStillOpens.)
func TestIdentity_aSecondDefaultInstallationRefusesToStart(t *testing.T) {
	ctx := context.Background()
	first := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	second := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	first.startGuard("first")
	first.waitPolicyEnforced()
	require.Eventually(t, func() bool {
		l := &coordinationv1.Lease{}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: first.ns, Name: "webhook-guard.webhook-guard.io"}, l) == nil &&
			l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	}, transition, 50*time.Millisecond, "the first installation never held its Lease")
	before := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, before))

	g := second.startGuardWithoutPolicy("second")
	code, err := g.Wait(transition)
	require.NoError(t, err, "the second installation started: it rewrites the first one's policy")
	assert.NotZero(t, code)
	t.Logf("second installation:\n%s", lastLine(g.Logs()))
	assert.Contains(t, g.Logs(), "the guard policy ValidatingAdmissionPolicy webhook-guard belongs to another webhook-guard installation, "+first.guardID.Username+
		" (its Lease "+first.ns+"/webhook-guard.webhook-guard.io is held by ")
	assert.Contains(t, g.Logs(), "Give this installation its own instance name (instance: <name> in its configuration")
	assert.Contains(t, g.Logs(), deleteGuardPolicy)

	after := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, after))
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the refused installation wrote the policy")
	first.waitPolicyEnforced()
}

// startGuardWithoutPolicy starts the setup's guard as startGuard does, but
// without applying its guard policy first: a second installation whose
// own policy is not applied over the first one's, so that the first one's
// still names its breaker.
func (s *breakerSetup) startGuardWithoutPolicy(name string) *harness.Guard {
	s.t.Helper()
	return env.StartGuardT(s.t, harness.GuardOptions{Name: name, Kubeconfig: s.guardID.KubeconfigPath, Config: s.config(""), WithoutPolicy: true,
		Args: []string{"--leader-elect", "--leader-election-namespace", s.ns}})
}

// An installation whose Lease is in a namespace of its own choosing
// (the chart's leaseNamespace) runs, and a second installation finds its
// Lease there, where its Deployment's --leader-election-namespace puts
// it: it refuses to start instead of taking the first one for gone and
// its policy over. (The Deployment is created as the installer would;
// no controller runs it, the guard runs as a process.)
func TestIdentity_aRunningInstallationIsFoundWhereItsDeploymentKeepsItsLease(t *testing.T) {
	ctx := context.Background()
	first := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	second := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	leases := testNamespace(t)
	labels := map[string]string{"app.kubernetes.io/name": "webhook-guard"}
	require.NoError(t, env.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: first.ns, Name: "webhook-guard"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "manager", Image: "webhook-guard:e2e", Args: []string{"run", "--leader-elect", "--leader-election-namespace=" + leases},
			}}}},
		},
	}))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leases, Name: "webhook-guard.webhook-guard.io"}})
	})
	first.startGuard("first", "--leader-election-namespace", leases)
	first.waitPolicyEnforced()
	require.Eventually(t, func() bool {
		l := &coordinationv1.Lease{}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: leases, Name: "webhook-guard.webhook-guard.io"}, l) == nil &&
			l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	}, transition, 50*time.Millisecond, "the first installation never held its Lease in %s", leases)

	g := second.startGuardWithoutPolicy("second")
	code, err := g.Wait(transition)
	require.NoError(t, err, "the second installation started: it took the first one, which runs, for gone")
	assert.NotZero(t, code)
	t.Logf("second installation:\n%s", lastLine(g.Logs()))
	assert.Contains(t, g.Logs(), "the guard policy ValidatingAdmissionPolicy webhook-guard belongs to another webhook-guard installation, "+first.guardID.Username+
		" (its Lease "+leases+"/webhook-guard.webhook-guard.io is held by ")
	first.waitPolicyEnforced()
}

// An installation given an instance name signs its entries anew
// ("identity/instance"). Its earlier circuit, signed by the identity alone,
// is not stranded: while the old installation's policy stands, the start
// is refused with the exact command that removes it; once it is gone the
// new one takes the circuit over (one patch, an Event naming both) and
// closes it when the webhook recovers.
func TestIdentity_anInstanceNameAddedTakesOverTheOpenCircuit(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	const instance = "renamed"
	grantInstancePolicy(t, s, instance)

	before := s.startGuard("before")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	_, open := s.waitOpen()
	require.Equal(t, s.guardID.Username, mustRecord(t, open)[s.hook].By)
	before.Stop()

	cfg := s.config("instance: " + instance + "\n")
	refused := s.startGuardWith("refused", cfg)
	code, err := refused.Wait(transition)
	require.NoError(t, err)
	assert.NotZero(t, code)
	t.Logf("first start with the instance name:\n%s", lastLine(refused.Logs()))
	assert.Contains(t, refused.Logs(), "another webhook-guard installation manages mutatingwebhookconfiguration "+s.name+" (ValidatingAdmissionPolicy webhook-guard)")
	assert.Contains(t, refused.Logs(), "the installation of webhook-guard ("+s.guardID.Username+") no longer runs: its Lease "+s.ns+"/webhook-guard.webhook-guard.io was released; delete its policy with: "+deleteGuardPolicy)
	assert.Equal(t, s.guardID.Username, mustRecord(t, s.get())[s.hook].By, "a refused start changes nothing")

	r := env.Kubectl(ctx, "", nil, strings.Fields(strings.TrimPrefix(deleteGuardPolicy, "kubectl "))...)
	require.NoError(t, r.Err, r.Stderr)

	after := s.startGuardWith("after", cfg)
	signer := s.guardID.Username + "/" + instance
	require.Eventually(t, func() bool { return mustRecord(t, s.get())[s.hook].By == signer }, transition, 50*time.Millisecond,
		"the renamed installation never took over its earlier circuit")
	assert.True(t, isOpen(s.get(), s.hook, s.mode), "a takeover changes only who owns the circuit")
	requireTakenOverEvent(t, s.name, "webhook-guard "+signer+" took over the open circuit on "+s.hook+" from "+s.guardID.Username+", which no longer runs")

	s.wh.SetBehaviour(webhookPath, harness.Allow())
	s.waitRestored()
	exited, _ := after.Exited()
	assert.False(t, exited, "the renamed installation exited")
}

// An installation moved to another namespace (so another ServiceAccount)
// finds its old home's circuit open and its old policy in place: the old
// one's Lease was released, so it takes both over and closes the circuit
// when the webhook recovers.
func TestIdentity_aMovedInstallationTakesOverTheOpenCircuit(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	old := s.startGuard("old-home")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	s.waitOpen()
	old.Stop()

	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	id, err := env.ServiceAccount(ctx, ns, "webhook-guard")
	require.NoError(t, err)
	grantGuard(t, ns, id, []string{s.name}, nil)
	moved, err := env.StartGuard(harness.GuardOptions{Name: "new-home", Kubeconfig: id.KubeconfigPath, Config: s.config(""),
		Args: []string{"--leader-elect", "--leader-election-namespace", ns, "--leader-election-lease-duration", "3s",
			"--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms"}})
	require.NoError(t, err)
	t.Cleanup(func() {
		moved.Stop()
		if t.Failed() {
			t.Logf("guard new-home logs:\n%s", moved.Logs())
		}
	})

	require.Eventually(t, func() bool { return mustRecord(t, s.get())[s.hook].By == id.Username }, transition, 50*time.Millisecond,
		"the moved installation never took over its old home's circuit")
	requireTakenOverEvent(t, s.name, "webhook-guard "+id.Username+" took over the open circuit on "+s.hook+" from "+s.guardID.Username+
		", which no longer runs (its Lease "+s.ns+"/webhook-guard.webhook-guard.io was released)")
	require.Eventually(t, func() bool {
		return admission.PolicyInPlace(ctx, env.Client, admission.Options{BreakerUsername: id.Username, Managed: map[string][]string{s.name: {s.hook}}}) == nil
	}, transition, 50*time.Millisecond, "the moved installation never took its policy over")

	s.wh.SetBehaviour(webhookPath, harness.Allow())
	s.waitRestored()
}

// grantInstancePolicy lets s's ServiceAccount update the policy objects of
// instance, as "guard manifests rbac" renders for a named instance, and
// removes them at the end.
func grantInstancePolicy(t *testing.T, s *breakerSetup, instance string) {
	t.Helper()
	ctx := context.Background()
	name := admission.PolicyName + "-" + instance
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "guard-policy-" + s.ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
		ResourceNames: []string{name}, Verbs: []string{"update"},
	}}}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, s.ns, "webhook-guard"))
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
		_ = env.Client.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

// requireTakenOverEvent waits for a CircuitTakenOver Event about the
// MutatingWebhookConfiguration name whose note contains want.
func requireTakenOverEvent(t *testing.T, name, want string) {
	t.Helper()
	var notes []string
	require.Eventually(t, func() bool {
		list, err := env.Clientset.EventsV1().Events(circuit.EventsNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		notes = notes[:0]
		for _, e := range list.Items {
			if e.Reason == decide.TakenOver && e.Regarding.Kind == circuit.KindMutating.ObjectKind() && e.Regarding.Name == name {
				notes = append(notes, e.Note)
				if strings.Contains(e.Note, want) {
					t.Logf("CircuitTakenOver: %s", e.Note)
					return true
				}
			}
		}
		return false
	}, transition, 100*time.Millisecond, "no CircuitTakenOver Event on %s says %q; found %q", name, want, notes)
}

// lastLine is the last non-empty line of a process's output: the error a
// refused start exits with.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
