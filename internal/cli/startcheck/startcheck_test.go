package startcheck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli/clitest"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/status"
)

// The fake client serves these narrow helpers; the e2e tests
// (test/e2e/identity_test.go) run the same paths against kube-apiserver.

// lease is the leader-election Lease of the default instance in
// namespace, held by holder ("" when released) and renewed at renewed.
func lease(namespace, holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: status.LeaderElectionID},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(renewed)),
		},
	}
}

func guardPolicy(breakerUsername, instance string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p, _ := admission.RenderPolicy(admission.Options{BreakerUsername: breakerUsername, Instance: instance, Managed: map[string][]string{clitest.Conf: {clitest.Hook}}})
	return p
}

func TestPolicyBreaker_readsTheIdentityRenderPolicyWrites(t *testing.T) {
	for _, identity := range []string{clitest.SAMain, "alice@example.com", `o'brien "the admin" \ root`, "oidc:https://issuer.example/ü/√"} {
		t.Run(identity, func(t *testing.T) {
			got, ok := policyBreaker(guardPolicy(identity, ""))
			require.True(t, ok)
			assert.Equal(t, identity, got)
			// A policy written before the rule-inputs annotation: its
			// isBreaker variable.
			old := guardPolicy(identity, "")
			delete(old.Annotations, admission.PolicyInputsAnnotation)
			got, ok = policyBreaker(old)
			require.True(t, ok)
			assert.Equal(t, identity, got)
		})
	}
	_, ok := policyBreaker(&admissionregistrationv1.ValidatingAdmissionPolicy{})
	assert.False(t, ok, "a policy without the isBreaker variable names no breaker")
}

func TestInstallationLiveness_readsTheLease(t *testing.T) {
	for name, tc := range map[string]struct {
		identity string
		objs     []client.Object
		want     liveness
		says     string
	}{
		"a Lease renewed within its duration is alive": {clitest.SAOther, []client.Object{lease("other", "pod-1_x", clitest.Clock.Add(-5*time.Second))}, alive, "held by pod-1_x"},
		"a released Lease is gone":                     {clitest.SAOther, []client.Object{lease("other", "", clitest.Clock.Add(-5*time.Second))}, gone, "was released"},
		"an expired Lease is gone":                     {clitest.SAOther, []client.Object{lease("other", "pod-1_x", clitest.Clock.Add(-time.Minute))}, gone, "expired at"},
		"no Lease is gone":                             {clitest.SAOther, nil, gone, "holds no Lease other/" + status.LeaderElectionID + " nor kube-system/" + status.LeaderElectionID},
		"a Lease in kube-system, as shipped, is read too": {clitest.SAOther, []client.Object{
			lease("other", "", clitest.Clock.Add(-5*time.Second)), lease(metav1.NamespaceSystem, "pod-2_y", clitest.Clock.Add(-5*time.Second)),
		}, alive, "kube-system/" + status.LeaderElectionID + " is held by pod-2_y"},
		"an expired Lease in kube-system is gone": {clitest.SAOther, []client.Object{lease(metav1.NamespaceSystem, "pod-2_y", clitest.Clock.Add(-time.Minute))}, gone, "expired at"},
		"a released Lease left in its namespace by an earlier release, and a live one in kube-system": {clitest.SAOther, []client.Object{
			lease("other", "", clitest.Clock.Add(-time.Hour)), lease(metav1.NamespaceSystem, "pod-3_z", clitest.Clock.Add(-time.Second)),
		}, alive, "held by pod-3_z"},
		"a user has no Lease one can find": {"alice@example.com", nil, unknown, "not a ServiceAccount"},
	} {
		t.Run(name, func(t *testing.T) {
			got, says := installationLiveness(context.Background(), clitest.FakeReader(tc.objs...), tc.identity, "", clitest.Clock)
			assert.Equal(t, tc.want, got)
			assert.Contains(t, says, tc.says)
		})
	}
}

// guardDeployment is the Deployment of the installation in namespace,
// named as shipped, whose pods keep their Lease in leaseNamespace.
func guardDeployment(namespace, leaseNamespace string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: factory.DefaultDeployment},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "manager", Args: []string{"run", "--leader-elect", "--leader-election-namespace=" + leaseNamespace},
		}}}}},
	}
}

// An installation with a custom leaseNamespace keeps its Lease neither in
// its ServiceAccount's namespace nor in kube-system: its Deployment says
// where, and the Lease is read there.
func TestInstallationLiveness_findsTheLeaseWhereItsDeploymentPutsIt(t *testing.T) {
	renewed := clitest.Clock.Add(-5 * time.Second)
	for name, tc := range map[string]struct {
		objs []client.Object
		want liveness
		says string
	}{
		"a live Lease in the namespace its Deployment names": {[]client.Object{guardDeployment("other", "leases"), lease("leases", "pod-1_x", renewed)},
			alive, "leases/" + status.LeaderElectionID + " is held by pod-1_x"},
		"an expired Lease there": {[]client.Object{guardDeployment("other", "leases"), lease("leases", "pod-1_x", clitest.Clock.Add(-time.Minute))},
			gone, "expired at"},
		"no Lease there nor anywhere": {[]client.Object{guardDeployment("other", "leases")},
			gone, "holds no Lease leases/" + status.LeaderElectionID + " nor other/" + status.LeaderElectionID + " nor kube-system/" + status.LeaderElectionID},
		"a Lease in a namespace its Deployment does not name is not found": {[]client.Object{guardDeployment("other", "kube-system"), lease("leases", "pod-1_x", renewed)},
			gone, "holds no Lease"},
	} {
		t.Run(name, func(t *testing.T) {
			got, says := installationLiveness(context.Background(), clitest.FakeReader(tc.objs...), clitest.SAOther, "", clitest.Clock)
			assert.Equal(t, tc.want, got)
			assert.Contains(t, says, tc.says)
		})
	}
	err := checkPolicyOwner(context.Background(), clitest.FakeReader(guardPolicy(clitest.SAOther, ""), guardDeployment("other", "leases"), lease("leases", "pod-1_x", renewed)),
		admission.Options{BreakerUsername: clitest.SAMain}, clitest.Clock)
	require.Error(t, err, "a running installation with a custom leaseNamespace was taken for gone")
	assert.Contains(t, err.Error(), "its Lease leases/"+status.LeaderElectionID+" is held by pod-1_x")
}

func TestCheckPolicyOwner_refusesAnotherRunningOwner(t *testing.T) {
	mine := admission.Options{BreakerUsername: clitest.SAMain}
	for name, tc := range map[string]struct {
		objs    []client.Object
		refused bool
	}{
		"no policy yet":                                 {nil, false},
		"its own policy":                                {[]client.Object{guardPolicy(clitest.SAMain, "")}, false},
		"another identity that runs":                    {[]client.Object{guardPolicy(clitest.SAOther, ""), lease("other", "pod-1_x", clitest.Clock)}, true},
		"another identity whose Lease was released":     {[]client.Object{guardPolicy(clitest.SAOther, ""), lease("other", "", clitest.Clock)}, false},
		"another identity that holds no Lease":          {[]client.Object{guardPolicy(clitest.SAOther, "")}, false},
		"another identity whose Lease cannot be found":  {[]client.Object{guardPolicy("alice@example.com", "")}, true},
		"another ServiceAccount of the same namespace":  {[]client.Object{guardPolicy("system:serviceaccount:main:old-name", ""), lease("main", "pod-1_x", clitest.Clock)}, false},
		"another identity's policy of another instance": {[]client.Object{guardPolicy(clitest.SAOther, "canary"), lease("other", "pod-1_x", clitest.Clock)}, false},
	} {
		t.Run(name, func(t *testing.T) {
			err := checkPolicyOwner(context.Background(), clitest.FakeReader(tc.objs...), mine, clitest.Clock)
			if !tc.refused {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy webhook-guard belongs to another webhook-guard installation, ")
			assert.Contains(t, err.Error(), "instance: <name> in its configuration")
			assert.Contains(t, err.Error(), "kubectl delete validatingadmissionpolicy,validatingadmissionpolicybinding webhook-guard")
		})
	}
}

// eventLog is a recorder.EventRecorder that keeps what it is given.
type eventLog struct{ events []string }

func (l *eventLog) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, _ string, note string, args ...any) {
	l.events = append(l.events, eventtype+" "+reason+" "+fmt.Sprintf(note, args...))
}

func (l *eventLog) AnnotatedEventf(regarding runtime.Object, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	l.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func TestTakeOverRetired_resignsOnlyWhatNoRunningBreakerOwns(t *testing.T) {
	cfg := &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: clitest.Conf, Webhook: clitest.Hook}}}
	mine := admission.Options{BreakerUsername: clitest.SAMain, Instance: "blue", Managed: cfg.Managed(circuit.KindMutating)}
	for name, tc := range map[string]struct {
		objs     []client.Object
		takeOver bool
	}{
		"the default instance of the same ServiceAccount, stopped": {[]client.Object{lease("main", "", clitest.Clock)}, true},
		"the default instance of the same ServiceAccount, running": {[]client.Object{lease("main", "pod-1_x", clitest.Clock)}, false},
	} {
		t.Run(name, func(t *testing.T) {
			c := clitest.FakeReader(append(tc.objs, clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: clitest.Entry(clitest.SAMain)}, nil))...)
			events := &eventLog{}
			require.NoError(t, takeOverRetired(context.Background(), c, events, cfg, mine, clitest.Clock))
			got := &admissionregistrationv1.MutatingWebhookConfiguration{}
			require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: clitest.Conf}, got))
			rec, err := circuit.Decode(got.Annotations)
			require.NoError(t, err)
			if !tc.takeOver {
				assert.Equal(t, clitest.SAMain, rec[clitest.Hook].By)
				assert.Empty(t, events.events)
				return
			}
			assert.Equal(t, clitest.SAMain+"/blue", rec[clitest.Hook].By)
			want := clitest.Entry(clitest.SAMain + "/blue")
			want.OpenedAt = rec[clitest.Hook].OpenedAt // as the record encodes it
			assert.Equal(t, want, rec[clitest.Hook], "only the signature changes")
			require.Len(t, events.events, 1)
			assert.Contains(t, events.events[0], "Normal CircuitTakenOver webhook-guard "+clitest.SAMain+"/blue took over the open circuit on "+clitest.Hook+" from "+clitest.SAMain+
				", which no longer runs (its Lease main/"+status.LeaderElectionID+" was released)")
		})
	}
}
