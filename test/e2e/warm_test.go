package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// TestFailover_aFollowerResolvesItsServicesBeforeItLeads: a follower
// watches its targets' Services before it leads (breaker.ServiceWarmer).
// After it has, the guard loses the right to list and watch Services,
// which stands in for an apiserver that no longer answers such a list on
// the bad day; the leader stops and the webhook hangs. The new leader's
// probes resolve the Service from the watch it already holds, and the
// circuit opens. Without the warming its first resolution would list the
// Service, be refused, and every probe would be Unknown: nothing opens.
func TestFailover_aFollowerResolvesItsServicesBeforeItLeads(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass", service: true})
	leader := s.startGuard("leader")
	require.Eventually(t, func() bool { return strings.Contains(leader.Logs(), "Successfully acquired lease") },
		transition, 20*time.Millisecond, "the first guard never led")
	follower := s.startGuard("follower")
	require.Eventually(t, func() bool {
		return strings.Contains(follower.Logs(), `"Watching the targets' Services, ahead of leading","services":1`)
	}, transition, 20*time.Millisecond, "the follower never watched the target's Service")
	require.NotContains(t, follower.Logs(), "Successfully acquired lease", "the second guard leads already")

	role := &rbacv1.ClusterRole{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "guard-" + s.ns}, role))
	role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "services") })
	require.NoError(t, env.Client.Update(ctx, role))
	require.Eventually(t, func() bool {
		err := s.guardID.Client.List(ctx, &corev1.ServiceList{}, client.InNamespace(s.ns))
		return apierrors.IsForbidden(err)
	}, transition, 20*time.Millisecond, "the guard may still list Services")

	leader.Stop() // releases its Lease
	s.wh.SetBehaviour(webhookPath, harness.Drop())
	took, _ := s.waitOpen()
	require.Contains(t, follower.Logs(), "Successfully acquired lease")
	require.NotContains(t, follower.Logs(), "Probe could not run", "the new leader's probes waited on a Service list")
	t.Logf("the follower took over and opened the circuit %s after the hang, resolving the Service from the watch it held before leading",
		took.Round(time.Millisecond))
}
