package e2e

// The guard's equivalence test: the one case table in admissiontest runs
// through the Go rule (admission.Decide), through the product's
// ValidatingAdmissionPolicy in the real kube-apiserver, and through the
// product's static webhook (admission.Handler behind the static manifest)
// in the same apiserver, with real ServiceAccount tokens, and the three
// must agree with the table case by case.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// guardStaticPrefix names the configurations the product's static manifest
// manages: case i of the table runs on guardStaticName(i). The manifest is
// written before the apiserver starts, so the names are fixed up front.
const guardStaticPrefix = harness.StaticPrefix + "guard-"

func guardStaticName(i int) string { return fmt.Sprintf("%s%d", guardStaticPrefix, i) }

// Identities of the equivalence test. The other service account is named so
// that its username is admissiontest.OtherSAUsername, which the table's
// expected Go messages contain. The release identity is the breaker's
// ServiceAccount name plus circuit.ReleaseSuffix, in its namespace, as the
// Helm chart names the pre-delete hook's.
const (
	guardBreakerNamespace = "webhook-guard-equivalence"
	guardBreakerName      = "webhook-guard"
	guardReleaserName     = guardBreakerName + circuit.ReleaseSuffix
	guardOtherNamespace   = "webhook-guard-e2e"
	guardOtherName        = "impostor"
	guardClusterRole      = "webhook-guard-equivalence"
)

// guardStatic is the product's admission handler, served over TLS for the
// static manifest that TestMain installs.
var guardStatic struct {
	server *harness.TLSServer
	// managed holds the managed configurations of both kinds, as the
	// table's cases name them.
	managed admission.Options
	// breaker is the breaker's username, known once its ServiceAccount
	// exists; until then the handler uses admission's default.
	breaker atomic.Pointer[string]

	mu    sync.Mutex
	calls map[string]int // admission requests by object name
}

// guardStaticOptions is the static handler's admission.Options.
func guardStaticOptions() admission.Options {
	opts := guardStatic.managed
	if b := guardStatic.breaker.Load(); b != nil {
		opts.BreakerUsername = *b
	}
	return opts
}

// guardStaticCalls returns how many admission requests for configuration
// name the product's static webhook has served.
func guardStaticCalls(name string) int {
	guardStatic.mu.Lock()
	defer guardStatic.mu.Unlock()
	return guardStatic.calls[name]
}

// startGuardStatic serves the product's handler through controller-runtime's
// webhook machinery and returns the product's static manifest for it, for
// harness.Options.ExtraStaticManifests. TestMain calls it before the
// apiserver starts, since static manifests are loaded at startup.
func startGuardStatic() (map[string][]byte, error) {
	guardStatic.managed = admission.Options{Managed: map[string][]string{}, ManagedValidating: map[string][]string{}}
	for i, c := range admissiontest.Cases() {
		for k, v := range c.ManagedConfigs(guardStaticName(i)) {
			addManaged(&guardStatic.managed, c.ConfigKind(), k, v)
		}
	}
	guardStatic.calls = map[string]int{}
	counted := ctrladmission.HandlerFunc(func(ctx context.Context, req ctrladmission.Request) ctrladmission.Response {
		guardStatic.mu.Lock()
		guardStatic.calls[req.Name]++
		guardStatic.mu.Unlock()
		// The breaker's identity is known only once the apiserver runs.
		product := &admission.Handler{Options: guardStaticOptions()}
		return product.Handle(ctx, req)
	})
	mux := http.NewServeMux()
	mux.Handle(admission.WebhookPath, &ctrladmission.Webhook{Handler: counted})
	srv, err := harness.StartTLSServer(harness.WebhookOptions{Host: "127.0.0.1"}, mux)
	if err != nil {
		return nil, err
	}
	guardStatic.server = srv
	manifest, err := admission.MarshalManifest(admission.RenderStaticWebhook(srv.URL(admission.WebhookPath), srv.CA.CertPEM, guardStaticOptions()))
	if err != nil {
		srv.Close()
		return nil, err
	}
	return map[string][]byte{"webhook-guard.yaml": manifest}, nil
}

// stopGuardStatic stops the product's static webhook.
func stopGuardStatic() {
	if guardStatic.server != nil {
		guardStatic.server.Close()
	}
}

// guardActors are the table's actors as real identities.
type guardActors struct {
	breaker, other, releaser *harness.Identity
}

// user is the actor's real identity, as the apiserver sees it.
func (a guardActors) user(actor admissiontest.Actor) authenticationv1.UserInfo {
	switch actor {
	case admissiontest.Breaker:
		return authenticationv1.UserInfo{Username: a.breaker.Username}
	case admissiontest.OtherSA:
		return authenticationv1.UserInfo{Username: a.other.Username}
	case admissiontest.Releaser:
		return authenticationv1.UserInfo{Username: a.releaser.Username}
	}
	return authenticationv1.UserInfo{Username: harness.AdminUsername}
}

func (a guardActors) client(actor admissiontest.Actor) client.Client {
	switch actor {
	case admissiontest.Breaker:
		return a.breaker.Client
	case admissiontest.OtherSA:
		return a.other.Client
	case admissiontest.Releaser:
		return a.releaser.Client
	}
	return env.Client
}

// setupGuardActors creates the breaker, the other service account and the
// release identity with the same RBAC on mutatingwebhookconfigurations,
// and waits until RBAC lets all of them in.
func setupGuardActors(t *testing.T) guardActors {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: guardClusterRole},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}},
	}
	if err := env.Client.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	var a guardActors
	var err error
	a.breaker, err = env.ServiceAccount(ctx, guardBreakerNamespace, guardBreakerName)
	require.NoError(t, err)
	a.other, err = env.ServiceAccount(ctx, guardOtherNamespace, guardOtherName)
	require.NoError(t, err)
	require.Equal(t, admissiontest.OtherSAUsername, a.other.Username)
	a.releaser, err = env.ServiceAccount(ctx, guardBreakerNamespace, guardReleaserName)
	require.NoError(t, err)
	require.Equal(t, circuit.ReleaseUsername(a.breaker.Username), a.releaser.Username)
	require.NoError(t, env.Bind(ctx, guardClusterRole+"-breaker", guardClusterRole, guardBreakerNamespace, guardBreakerName))
	require.NoError(t, env.Bind(ctx, guardClusterRole+"-other", guardClusterRole, guardOtherNamespace, guardOtherName))
	require.NoError(t, env.Bind(ctx, guardClusterRole+"-releaser", guardClusterRole, guardBreakerNamespace, guardReleaserName))
	for _, id := range []*harness.Identity{a.breaker, a.other, a.releaser} {
		require.Eventually(t, func() bool {
			return id.Client.List(ctx, &admissionregistrationv1.MutatingWebhookConfigurationList{}, client.Limit(1)) == nil
		}, propagation, 50*time.Millisecond, "RBAC never let %s list mutatingwebhookconfigurations", id.Username)
	}
	return a
}

// applyCase applies the case's edit and override to obj, as Case.Build does
// to a copy of Old.
func applyCase(c admissiontest.Case, obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	if c.Edit != nil {
		c.Edit(obj)
	}
	switch c.Override {
	case admissiontest.OverridePresent, admissiontest.OverrideEmpty:
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Annotations[circuit.OverrideAnnotation] = ""
		if c.Override == admissiontest.OverridePresent {
			obj.Annotations[circuit.OverrideAnnotation] = admissiontest.OverrideReason
		}
	default:
		delete(obj.Annotations, circuit.OverrideAnnotation)
	}
}

// addManaged adds configuration name of kind, with webhooks, to opts.
func addManaged(opts *admission.Options, kind circuit.Kind, name string, webhooks []string) {
	if kind == circuit.KindValidating {
		opts.ManagedValidating[name] = webhooks
		return
	}
	opts.Managed[name] = webhooks
}

// caseOptions are the rule's options for running c on configuration name.
func caseOptions(c admissiontest.Case, name, breaker string) admission.Options {
	opts := admission.Options{BreakerUsername: breaker, Managed: map[string][]string{}, ManagedValidating: map[string][]string{}}
	for k, v := range c.ManagedConfigs(name) {
		addManaged(&opts, c.ConfigKind(), k, v)
	}
	return opts
}

// realObject returns the object a case's view stands for: the view itself
// for a mutating case, the ValidatingWebhookConfiguration for a validating
// one.
func realObject(c admissiontest.Case, view *admissionregistrationv1.MutatingWebhookConfiguration) client.Object {
	if c.ConfigKind() == circuit.KindValidating {
		return admissiontest.AsValidating(view)
	}
	return view
}

// goDecision runs the Go rule on the table's own objects for name.
func goDecision(c admissiontest.Case, name, breaker string) admission.Decision {
	old, new := c.Build(name)
	return admission.Decide(admission.Request{
		Kind: c.Kind, Operation: admissionv1.Update, Old: old, New: new,
		User: admissiontest.UserInfo(c.Actor, breaker),
	}, caseOptions(c, name, breaker))
}

// runGuardCase creates the case's starting object on name as the breaker
// (the only identity the guard lets write owned fields), then sends the
// case's UPDATE as the case's actor: the live object with the case's edit
// applied, so that the apiserver's defaulting adds no diff of its own. It
// checks that the object changed exactly when the update was admitted, and
// returns the Go rule's message for the live pair and the update's error.
func runGuardCase(t *testing.T, a guardActors, c admissiontest.Case, name string) (string, error) {
	t.Helper()
	ctx := context.Background()
	kind := c.ConfigKind()
	start, _ := c.Build(name)
	require.NoError(t, a.breaker.Client.Create(ctx, realObject(c, start)), "the breaker could not create the starting object")
	t.Cleanup(func() {
		obj := kind.New()
		obj.SetName(name)
		_ = env.Client.Delete(context.Background(), obj)
	})

	liveView := func() *admissionregistrationv1.MutatingWebhookConfiguration {
		obj := kind.New()
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, obj))
		view, err := circuit.View(obj)
		require.NoError(t, err)
		return view
	}
	live := liveView()
	sent := live.DeepCopy()
	applyCase(c, sent)
	want := sent.DeepCopy()

	// The live old/new pair must mean to the rule what the table's pair means.
	onLive := admission.Decide(admission.Request{
		Kind: c.Kind, Operation: admissionv1.Update, Old: live, New: want,
		User: a.user(c.Actor),
	}, caseOptions(c, name, a.breaker.Username))
	require.Equal(t, c.WantAllowed, onLive.Allowed, "the Go rule decides the live objects differently from the table's: %s", onLive.Message)

	err := a.client(c.Actor).Update(ctx, realObject(c, sent))

	after := liveView()
	if err == nil {
		assert.NotEqual(t, live.ResourceVersion, after.ResourceVersion, "an admitted update did not change the object")
		assert.True(t, equality.Semantic.DeepEqual(want.Webhooks, after.Webhooks), "stored webhooks differ from the ones sent")
		assert.True(t, equality.Semantic.DeepEqual(want.Annotations, after.Annotations), "stored annotations %v, sent %v", after.Annotations, want.Annotations)
		assert.True(t, equality.Semantic.DeepEqual(want.Labels, after.Labels), "stored labels %v, sent %v", after.Labels, want.Labels)
	} else {
		assert.Equal(t, live.ResourceVersion, after.ResourceVersion, "a denied update changed the object")
	}
	return onLive.Message, err
}

func decisionString(allowed bool) string {
	if allowed {
		return "allow"
	}
	return "deny"
}

// TestGuard_equivalence runs every case of admissiontest.Cases through the
// Go rule, the product's ValidatingAdmissionPolicy and the product's static
// webhook, and requires all three to agree with the table.
func TestGuard_equivalence(t *testing.T) {
	ctx := context.Background()
	dumpOnFailure(t, guardBreakerNamespace, guardOtherNamespace)
	actors := setupGuardActors(t)
	breaker := actors.breaker.Username
	cases := admissiontest.Cases()

	type row struct{ goRule, vap, static string }
	rows := make([]row, len(cases))
	for i, c := range cases {
		rows[i] = row{goRule: decisionString(goDecision(c, guardStaticName(i), breaker).Allowed), vap: "not run", static: "not run"}
	}

	t.Run("VAP", func(t *testing.T) {
		names := make([]string, len(cases))
		managed := admission.Options{BreakerUsername: breaker, Managed: map[string][]string{}, ManagedValidating: map[string][]string{}}
		for i, c := range cases {
			names[i] = uniqueName(t, "guard-vap")
			for k, v := range c.ManagedConfigs(names[i]) {
				addManaged(&managed, c.ConfigKind(), k, v)
			}
		}
		sentinel := uniqueName(t, "guard-vap-sentinel")
		managed.Managed[sentinel] = []string{admissiontest.ManagedWebhook}

		// The sentinel is created before the policy exists; flipping its
		// managed failurePolicy as admin is denied once the policy is live.
		require.NoError(t, env.Client.Create(ctx, admissiontest.Healthy(sentinel)))
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: sentinel}})
		})

		policy, binding := admission.RenderPolicy(managed)
		policyName := uniqueName(t, "webhook-guard-equivalence")
		policy.Name, binding.Name, binding.Spec.PolicyName = policyName, policyName, policyName
		require.NoError(t, env.Client.Create(ctx, policy))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), policy) })
		require.NoError(t, env.Client.Create(ctx, binding))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), binding) })

		var err error
		require.Eventually(t, func() bool {
			mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err = env.Client.Get(ctx, client.ObjectKey{Name: sentinel}, mwc); err != nil {
				return false
			}
			for i := range mwc.Webhooks {
				if h := &mwc.Webhooks[i]; h.Name == admissiontest.ManagedWebhook {
					p := admissionregistrationv1.Ignore
					if *h.FailurePolicy == p {
						p = admissionregistrationv1.Fail
					}
					h.FailurePolicy = &p
				}
			}
			err = env.Client.Update(ctx, mwc)
			return err != nil && !apierrors.IsConflict(err)
		}, propagation, 100*time.Millisecond, "the policy never denied a change to the sentinel's failurePolicy")
		require.True(t, apierrors.IsForbidden(err), "want Forbidden from the live policy, got %v", err)
		require.Contains(t, err.Error(), policyName)
		require.Contains(t, err.Error(), "may not change fields owned by webhook-guard")
		live := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: policyName}, live))
		if tc := live.Status.TypeChecking; tc != nil && len(tc.ExpressionWarnings) > 0 {
			t.Logf("policy type-checking warnings: %+v", tc.ExpressionWarnings)
		}

		for i, c := range cases {
			name := names[i]
			t.Run(c.Name, func(t *testing.T) {
				goMessage, err := runGuardCase(t, actors, c, name)
				rows[i].vap = decisionString(err == nil)
				if c.WantAllowed {
					assert.NoError(t, err, "the policy denied an update the table allows")
					return
				}
				require.Error(t, err, "the policy admitted an update the table denies")
				assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
				msg := err.Error()
				assert.Contains(t, msg, "ValidatingAdmissionPolicy '"+policyName+"'")
				assert.Contains(t, msg, c.ConfigKind().Singular()+` "`+name+`"`)
				for _, want := range c.WantMessage(name) {
					assert.Contains(t, msg, want)
				}
				assert.True(t, strings.HasSuffix(msg, ": "+goMessage), "the policy's message is not the Go rule's\npolicy: %s\nGo:     %s", msg, goMessage)
				t.Logf("denied: %s", msg)
			})
		}
	})

	t.Run("static", func(t *testing.T) {
		require.NotNil(t, guardStatic.server, "TestMain did not start the product's static webhook")
		guardStatic.breaker.Store(&breaker)
		for i, c := range cases {
			name := guardStaticName(i)
			t.Run(c.Name, func(t *testing.T) {
				before := guardStaticCalls(name)
				goMessage, err := runGuardCase(t, actors, c, name)
				rows[i].static = decisionString(err == nil)
				calls := guardStaticCalls(name) - before
				if c.Managed {
					// The breaker's CREATE and the actor's UPDATE.
					assert.Equal(t, 2, calls, "the product's static webhook was not called for both writes")
				} else {
					assert.Zero(t, calls, "the static manifest's matchCondition let an unmanaged configuration through")
				}
				if c.WantAllowed {
					assert.NoError(t, err, "the static webhook denied an update the table allows")
					return
				}
				require.Error(t, err, "the static webhook admitted an update the table denies")
				assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
				msg := err.Error()
				assert.Contains(t, msg, `admission webhook "`+admission.StaticWebhookEntryName+`" denied the request`)
				for _, s := range c.WantMessage(name) {
					assert.Contains(t, msg, s)
				}
				assert.True(t, strings.HasSuffix(msg, ": "+goMessage), "the webhook's message is not the Go rule's\nwebhook: %s\nGo:      %s", msg, goMessage)
				t.Logf("denied: %s", msg)
			})
		}
	})

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tWANT\tGO\tVAP\tSTATIC\t")
	var disagree []string
	for i, c := range cases {
		r := rows[i]
		want := decisionString(c.WantAllowed)
		mark := ""
		if r.goRule != want || r.vap != want || r.static != want {
			mark = "  <-- DISAGREES"
			disagree = append(disagree, c.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, want, r.goRule, r.vap, r.static, mark)
	}
	_ = tw.Flush()
	t.Logf("guard equivalence, %d cases:\n%s", len(cases), b.String())
	if len(disagree) > 0 {
		t.Errorf("%d case(s) where the Go rule, the policy or the static webhook disagree with the table: %s", len(disagree), strings.Join(disagree, "; "))
	}
}
