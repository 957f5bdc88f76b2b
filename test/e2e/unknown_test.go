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
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// An open circuit whose probe can no longer run (here: the guard restarts
// without the RBAC to read the webhook's Service) is not left open in silence: a
// ProbeUnknownWhileOpen Event and guard status say so. Then the
// apiserver's own calls decide. In Ignore mode kube-apiserver still calls
// the webhook, and once those calls succeed the circuit closes; in Bypass
// mode it makes no calls, and the circuit stays open.
func TestUnknown_whileOpen(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		closes bool
	}{{"Ignore", true}, {"Bypass", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx := context.Background()
			s := newBreakerSetup(t, setupOptions{mode: tc.mode, service: true})
			g := s.startGuard("guard")
			waitHealthyProbes(t, g, 2)
			s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
			s.waitOpen()

			// The guard loses its RBAC on Services. A running guard keeps
			// the resolution it has (it asks the apiserver nothing more
			// about a Service it resolved), so it restarts: a
			// guard that never resolved the Service cannot probe it, and
			// its probe is Unknown from now on.
			role := &rbacv1.ClusterRole{}
			require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "guard-" + s.ns}, role))
			services := harness.GuardRules(nil)["services"]
			kept := role.Rules[:0]
			for _, r := range role.Rules {
				if fmt.Sprint(r.Resources) != fmt.Sprint(services.Resources) || r.APIGroups[0] != "" {
					kept = append(kept, r)
				}
			}
			role.Rules = kept
			require.NoError(t, env.Client.Update(ctx, role))
			// The RBAC authorizer learns of the change from its informers.
			require.Eventually(t, func() bool {
				review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: s.ns, Verb: "list", Resource: "services"},
				}}
				return s.guardID.Client.Create(ctx, review) == nil && !review.Status.Allowed
			}, transition, 50*time.Millisecond, "the guard may still list Services")
			g.Stop()
			g = s.startGuard("guard-restarted")
			require.Eventually(t, func() bool { return contains(eventReasons(t, s.name), "ProbeUnknownWhileOpen") },
				transition, 50*time.Millisecond, "no ProbeUnknownWhileOpen Event")
			st, err := guardStatus(g)
			require.NoError(t, err)
			assert.Contains(t, st.Last, "Unknown for")

			// The webhook recovers, and requests keep coming.
			s.wh.SetBehaviour(webhookPath, harness.Allow())
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					_ = env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: fmt.Sprintf("traffic-%d", i), Labels: map[string]string{"app": "demo"}}})
				}
			})
			defer func() { close(stop); wg.Wait() }()

			if tc.closes {
				s.waitRestored()
				// The Event follows the write; wait for it.
				var closing string
				require.Eventually(t, func() bool {
					closing = eventNotes(t, circuit.KindMutating, s.name)[string(decide.Closed)]
					return closing != ""
				}, transition, 50*time.Millisecond, "no CircuitClosed Event")
				assert.Contains(t, closing, "intervals in which the probe could not run")
				assert.Contains(t, closing, "while the apiserver's own calls to the webhook succeeded")
				return
			}
			// Bypass: hold. The probe keeps saying Unknown for many more
			// intervals and the apiserver signal keeps scraping; nothing
			// can show the webhook healthy, so nothing closes.
			before := strings.Count(g.Logs(), "Probe could not run; nothing counted")
			require.Eventually(t, func() bool {
				return strings.Count(g.Logs(), "Probe could not run; nothing counted") >= before+20
			}, transition, 50*time.Millisecond)
			assert.True(t, isOpen(s.get(), s.hook, s.mode), "a Bypass circuit whose probe cannot run stays open")
			st, err = guardStatus(g)
			require.NoError(t, err)
			assert.Contains(t, st.Last, "stays open otherwise")
		})
	}
}
