package partition

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// TestPartition_aCutOfOneServiceAmongManyIsProbedFirst: 40 service-backed
// webhooks, each behind its own Service, so at PathProbeGap the road
// schedule comes back to each road every 28 s. One road is cut just
// after its probe, while requests call its webhook. kube-apiserver's own
// calls fail, the next read of its /metrics says so, and that road is
// probed next instead of in 28 s: the circuit opens within a few
// intervals of that read.
func TestPartition_aCutOfOneServiceAmongManyIsProbedFirst(t *testing.T) {
	const roads = 40
	ctx := context.Background()
	w := newWorld(t)
	w.withRoad()
	// One guard, w's ServiceAccount, for every world's target and road.
	worlds := []*world{w}
	names := []string{w.name}
	for range roads - 1 {
		d := newWorld(t)
		d.withRoadFor(w.id)
		worlds = append(worlds, d)
		names = append(names, d.name)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "guard-many-" + w.ns}, Rules: slices.Collect(maps.Values(harness.GuardRules(names)))}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, w.ns, "webhook-guard"))

	var b strings.Builder
	b.WriteString("apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\napiserverScrapeInterval: 1s\ntargets:\n")
	for _, x := range worlds {
		fmt.Fprintf(&b, `- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: Bypass
  openAfter: 3
  probe: {interval: 500ms, timeout: 1s}
  apiserverSignal:
    enabled: true
    minRequests: 3
    pathProbe:
      service: {namespace: %s, name: hook, port: %d}
`, x.name, x.hook, x.ns, x.wh.Port())
	}
	env.StartGuardT(t, harness.GuardOptions{Name: "hurry", Kubeconfig: w.id.KubeconfigPath, Config: b.String(), WithoutMarking: true})
	// The schedule's GETs of w's road: the calls on its path that carry no
	// AdmissionReview (the direct probe POSTs one).
	roadProbes := func() int { return w.wh.Calls(path) - len(w.wh.Requests(path)) }
	sweep := roads * breaker.PathProbeGap
	before := roadProbes()
	require.Eventually(t, func() bool { return roadProbes() > before }, 2*sweep, 20*time.Millisecond, "the schedule never probed the road")

	// Just after its probe: its next turn is a sweep away.
	cut := time.Now()
	w.cutRoad()
	startLoad(t, w.ns)
	entry := w.waitOpen()
	took := time.Since(cut)
	t.Logf("one road cut among %d (a sweep every %s): opened %s after the cut (signal %s), after %d probes of the road in all",
		roads, sweep, took.Round(10*time.Millisecond), entry.Signal, roadProbes())
	assert.Less(t, took, sweep*3/5, "the cut road waited for its turn in the sweep")
}
