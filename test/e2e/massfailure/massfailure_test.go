package massfailure

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// Every webhook the guard probes hanging at once is what the all-fail hold
// takes for the guard's own network: it keeps the openings back, but for
// at most its bound. With every setting at its default (a probe every 1 s,
// openAfter 3, holdWhenAllFail 3, the probe's slow-call threshold of 4 s
// against kube-apiserver's default timeoutSeconds of 10), 50 webhooks in
// 10 configurations, each configuration's webhooks on a backend of their
// own, all open within the slow-call threshold, openAfter intervals and the
// hold's bound, and a margin for the guard's own work.
func TestBadDay_aMassHangOpensWithinTheHoldsBound(t *testing.T) {
	const configurations, perConfiguration = 10, 5
	ctx := context.Background()
	name := uniqueName("masshang")
	targetNS := namespace(t, name+"-target")
	guardNS := namespace(t, name+"-guard")

	type hook struct {
		configuration, name string
		wh                  *harness.Webhook
	}
	var hooks []hook
	var names []string
	var cfg strings.Builder
	cfg.WriteString("apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\ntargets:\n")
	for i := range configurations {
		// One backend per configuration: the hold counts webhooks that
		// share one as one, and here ten are failing.
		wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
		require.NoError(t, err)
		t.Cleanup(wh.Close)
		configuration := fmt.Sprintf("%s-%d", name, i)
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: configuration}}
		for j := range perConfiguration {
			path := fmt.Sprintf("/hook%d", j)
			wh.SetBehaviour(path, harness.Allow())
			w := harness.ConfigMapWebhook(fmt.Sprintf("w%d.%s.webhook-guard.io", j, configuration), targetNS, wh.URL(path), wh.CA.CertPEM, admissionregistrationv1.Fail)
			w.TimeoutSeconds = nil // kube-apiserver's default, 10
			mwc.Webhooks = append(mwc.Webhooks, w)
			hooks = append(hooks, hook{configuration, w.Name, wh})
			// Every setting but the approval at its default.
			fmt.Fprintf(&cfg, "- configuration: %s\n  webhook: %s\n  allowAdmissionWithoutMutation: true\n", configuration, w.Name)
		}
		require.NoError(t, env.Client.Create(ctx, mwc))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), mwc) })
		names = append(names, configuration)
	}
	id, err := env.ServiceAccount(ctx, guardNS, "webhook-guard")
	require.NoError(t, err)
	require.NoError(t, env.GrantGuard(ctx, guardNS, id, names))
	first := hooks[0]
	startGuard(t, name, id, cfg.String(), first.wh, "/hook0")
	// Every webhook answered its probes healthy before the hang.
	require.Eventually(t, func() bool {
		for _, h := range hooks {
			if h.wh.Calls("/hook0") < 3 {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond, "not every webhook was probed")

	open := func() int {
		n := 0
		for _, c := range names {
			got := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: c}, got); err != nil {
				continue
			}
			for _, h := range hooks {
				if h.configuration == c && harness.IsOpen(got, h.name, string(config.DefaultMode)) {
					n++
				}
			}
		}
		return n
	}
	hung := time.Now()
	for i := range configurations {
		for j := range perConfiguration {
			hooks[i*perConfiguration+j].wh.SetBehaviour(fmt.Sprintf("/hook%d", j), harness.Delayed(time.Minute, harness.Allow()))
		}
	}
	require.Eventually(t, func() bool { return open() == len(hooks) }, 2*time.Minute, 100*time.Millisecond,
		"not every circuit opened: %d of %d", open(), len(hooks))
	opened := time.Since(hung)

	// The bound: the first failure comes after the slow-call threshold, the
	// openAfter-th one openAfter-1 intervals later, and then the hold keeps
	// the openings back for at most its bound; the margin is for the guard's
	// and kube-apiserver's own work on a shared 2-core machine, not for the
	// hold.
	const margin = 8 * time.Second
	interval := config.DefaultProbeInterval
	bound := probe.DefaultSlowCall + config.DefaultOpenAfter*interval + breaker.HoldBoundIntervals*interval + margin
	t.Logf("%d webhooks in %d configurations, every default: all open %.2f s after they hung (bound %s)", len(hooks), configurations, opened.Seconds(), bound)
	assert.LessOrEqual(t, opened, bound, "the openings were held past the hold's bound")
}
