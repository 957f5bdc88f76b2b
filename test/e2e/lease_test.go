package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/status"
)

// An upgrade from a release that kept its Lease in the guard's namespace
// to one that keeps it in kube-system is a rollout in which
// both run for a while, each on its own Lease. The new guard does not lead
// while the earlier release's leader holds the Lease in the guard's
// namespace: two leaders would both probe and write. It leads once that
// one stops and releases its Lease.
func TestLease_anUpgradeLeadsOnlyAfterTheEarlierReleasesLeaderStops(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	instance := "handover-" + strings.TrimPrefix(s.name, "breaker-")
	grantInstancePolicy(t, s, instance)
	cfg := s.config("instance: " + instance + "\n")
	name := status.LeaseName(instance)
	timings := []string{"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms"}
	holder := func(namespace string) string {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, l); err != nil {
			require.True(t, apierrors.IsNotFound(err), "%v", err)
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name}})
	})

	earlier := s.startGuardWith("earlier-release", cfg, timings...)
	var earlierHolder string
	require.Eventually(t, func() bool { earlierHolder = holder(s.ns); return earlierHolder != "" }, transition, 50*time.Millisecond,
		"the earlier release never took its Lease in %s", s.ns)

	this := s.startGuardWith("this-release", cfg, append(timings, "--leader-election-namespace", metav1.NamespaceSystem)...)
	require.Eventually(t, func() bool {
		return strings.Contains(this.Logs(), "Waiting to lead: another revision keeps a Lease of this name")
	}, transition, 50*time.Millisecond, "this release never tried to take its Lease, or took it")
	assert.Empty(t, holder(metav1.NamespaceSystem), "this release took its Lease while the earlier release's leader led")
	assert.Equal(t, earlierHolder, holder(s.ns), "the earlier release's leader lost its Lease")
	assert.Contains(t, this.Logs(), s.ns+"/"+name)

	earlier.Stop()
	var thisHolder string
	require.Eventually(t, func() bool { thisHolder = holder(metav1.NamespaceSystem); return thisHolder != "" }, transition, 50*time.Millisecond,
		"this release never led after the earlier release's leader stopped")
	assert.NotEqual(t, earlierHolder, thisHolder)
	assert.Empty(t, holder(s.ns), "the earlier release's Lease was not released")
	exited, _ := this.Exited()
	assert.False(t, exited, "this release exited")
}

// A rollout that moves the Lease runs two revisions at once, each on a
// Lease of its own, and so does the rollback. Whichever way the Lease
// moves, a watch on both Leases sees one live holder at a time: the guard
// of the new revision leads only once the other revision's leader has
// stopped and released its Lease, in the upgrade and in the rollback
// alike. Between kube-system and a custom namespace, the guard of the
// rolled-back revision finds the custom one in the ReplicaSet of the
// revision it replaces, as a Deployment leaves it (the test creates the
// ReplicaSets; no controller runs them).
func TestLease_oneLeaderInAnUpgradeAndARollbackWhicheverWayTheLeaseMoves(t *testing.T) {
	for name, tc := range map[string]struct {
		from, to func(s *breakerSetup) string // the earlier revision's Lease namespace, and the later one's
	}{
		"between the guard's namespace and kube-system": {
			func(s *breakerSetup) string { return s.ns }, func(*breakerSetup) string { return metav1.NamespaceSystem }},
		"between kube-system and a custom namespace": {
			func(*breakerSetup) string { return metav1.NamespaceSystem }, func(*breakerSetup) string { return testNamespace(t) }},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
			instance := "rollout-" + strings.TrimPrefix(s.name, "breaker-")
			grantInstancePolicy(t, s, instance)
			cfg := s.config("instance: " + instance + "\n")
			name := status.LeaseName(instance)
			from, to := tc.from(s), tc.to(s)
			timings := []string{"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms"}
			holder := func(namespace string) string {
				l := &coordinationv1.Lease{}
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, l); err != nil {
					require.True(t, apierrors.IsNotFound(err), "%v", err)
					return ""
				}
				return ptr.Deref(l.Spec.HolderIdentity, "")
			}
			leads := func(namespace, who string) {
				t.Helper()
				require.Eventually(t, func() bool { return holder(namespace) != "" }, transition, 50*time.Millisecond, "%s never took its Lease in %s", who, namespace)
			}
			// Not require: a guard that does not wait leads beside the
			// other, which the watch below then shows.
			waits := func(g interface{ Logs() string }, who, namespace string) {
				t.Helper()
				assert.Eventually(t, func() bool {
					return strings.Contains(g.Logs(), "Waiting to lead: another revision keeps a Lease of this name")
				}, transition, 50*time.Millisecond, "%s never waited for the other revision's leader", who)
				assert.Contains(t, g.Logs(), namespace+"/"+name, "%s waited for another Lease", who)
			}
			for _, ns := range []string{from, to} {
				t.Cleanup(func() {
					_ = env.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
				})
			}
			leases := watchLeases(t, name, from, to)

			createRolloutReplicaSet(t, s.ns, "webhook-guard-1", from)
			earlier := s.startGuardWith("earlier-revision", cfg, append(timings, "--leader-election-namespace", from)...)
			leads(from, "the earlier revision")

			// The upgrade.
			createRolloutReplicaSet(t, s.ns, "webhook-guard-2", to)
			later := s.startGuardWith("later-revision", cfg, append(timings, "--leader-election-namespace", to)...)
			waits(later, "the later revision", from)
			earlier.Stop()
			leads(to, "the later revision")

			// The rollback: the earlier revision's ReplicaSet runs again.
			rolledBack := s.startGuardWith("rolled-back", cfg, append(timings, "--leader-election-namespace", from)...)
			waits(rolledBack, "the rolled-back revision", to)
			assert.Empty(t, holder(from), "the rolled-back revision took its Lease while the later revision's leader led")
			later.Stop()
			leads(from, "the rolled-back revision")
			rolledBack.Stop()

			holds := leases.stop(t)
			t.Logf("holds: %v", holds)
			assert.Len(t, holds[from], 2, "the earlier revision's and the rolled-back one's")
			assert.Len(t, holds[to], 1, "the later revision's")
			for _, a := range holds[from] {
				for _, b := range holds[to] {
					assert.False(t, a.from.Before(b.until) && b.from.Before(a.until), "two live holders at once: %v in %s and %v in %s", a, from, b, to)
				}
			}
		})
	}
}

// createRolloutReplicaSet creates the ReplicaSet that a Deployment's
// rollout leaves in namespace for a revision whose pods keep their Lease
// in leaseNamespace, as the guard reads it: only its pod template.
func createRolloutReplicaSet(t *testing.T, namespace, name, leaseNamespace string) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "webhook-guard", "pod-template-hash": name}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "manager", Image: "webhook-guard:e2e",
					Args: []string{"run", "--leader-elect", "--leader-election-namespace=" + leaseNamespace},
				}}},
			},
		},
	}
	require.NoError(t, env.Client.Create(context.Background(), rs))
}

// leaseHold is one holder's hold of a Lease: from its acquireTime until
// it released the Lease, or until its last renewal ran out.
type leaseHold struct {
	holder      string
	from, until time.Time
}

func (h leaseHold) String() string {
	return fmt.Sprintf("%s [%s, %s]", h.holder, h.from.Format("15:04:05.000"), h.until.Format("15:04:05.000"))
}

// leaseWatch keeps, for each namespace, every state of one Lease that a
// watch delivered, in order.
type leaseWatch struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	states map[string][]coordinationv1.LeaseSpec
	closed []string // namespaces whose watch ended before stop
	done   sync.WaitGroup
}

// watchLeases watches the Lease name in each namespace until stop.
func watchLeases(t *testing.T, name string, namespaces ...string) *leaseWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &leaseWatch{cancel: cancel, states: map[string][]coordinationv1.LeaseSpec{}}
	for _, ns := range namespaces {
		watch, err := env.Clientset.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		require.NoError(t, err)
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			defer watch.Stop()
			for ev := range watch.ResultChan() {
				if l, ok := ev.Object.(*coordinationv1.Lease); ok {
					w.mu.Lock()
					w.states[ns] = append(w.states[ns], *l.Spec.DeepCopy())
					w.mu.Unlock()
				}
			}
			if ctx.Err() == nil {
				w.mu.Lock()
				w.closed = append(w.closed, ns)
				w.mu.Unlock()
			}
		}()
	}
	return w
}

// stop ends the watches and returns the holds of each namespace's Lease
// as the Lease itself records them: a hold starts at its acquireTime and
// ends at the write that released it (its renewTime), or, when none did,
// at the last renewal plus the Lease's duration.
func (w *leaseWatch) stop(t *testing.T) map[string][]leaseHold {
	t.Helper()
	w.cancel()
	w.done.Wait()
	require.Empty(t, w.closed, "a watch ended early: the holds would be incomplete")
	holds := map[string][]leaseHold{}
	for ns, states := range w.states {
		var cur *leaseHold
		for _, spec := range states {
			h := ptr.Deref(spec.HolderIdentity, "")
			if cur != nil && h != cur.holder {
				if h == "" && spec.RenewTime != nil && spec.RenewTime.Time.Before(cur.until) {
					cur.until = spec.RenewTime.Time
				}
				holds[ns] = append(holds[ns], *cur)
				cur = nil
			}
			if h == "" || spec.RenewTime == nil || spec.LeaseDurationSeconds == nil {
				continue
			}
			if cur == nil {
				from := spec.RenewTime.Time
				if spec.AcquireTime != nil {
					from = spec.AcquireTime.Time
				}
				cur = &leaseHold{holder: h, from: from}
			}
			cur.until = spec.RenewTime.Add(time.Duration(*spec.LeaseDurationSeconds) * time.Second)
		}
		if cur != nil {
			holds[ns] = append(holds[ns], *cur)
		}
	}
	return holds
}
