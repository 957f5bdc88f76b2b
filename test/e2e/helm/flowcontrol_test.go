package helm

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The response headers in which kube-apiserver's API Priority and Fairness
// names the FlowSchema and the priority level it classified a request in.
const (
	flowSchemaHeader    = "X-Kubernetes-PF-FlowSchema-UID"
	priorityLevelHeader = "X-Kubernetes-PF-PriorityLevel-UID"
)

// TestHelm_guardRequestsHaveAFlowOfTheirOwn installs the chart with its
// defaults: kube-apiserver then classifies every request of the guard's
// ServiceAccount (namespaced, cluster-scoped, non-resource) under the
// chart's FlowSchema and priority level, and another ServiceAccount's
// requests elsewhere, so that the guard's requests do not queue behind
// those that wait on a hanging webhook.
func TestHelm_guardRequestsHaveAFlowOfTheirOwn(t *testing.T) {
	ctx := context.Background()
	install := runHelm(t, append([]string{"install", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--create-namespace"}, exampleValues()...)...)
	require.NoError(t, install.err, "helm install:\n%s%s", install.stdout, install.stderr)
	// No kubelet runs the pre-delete hook's Job here: helm would wait for it.
	t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })

	schema, err := env.Clientset.FlowcontrolV1().FlowSchemas().Get(ctx, "webhook-guard", metav1.GetOptions{})
	require.NoError(t, err, "the chart installs the FlowSchema by default")
	level, err := env.Clientset.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "webhook-guard", metav1.GetOptions{})
	require.NoError(t, err, "the chart installs the PriorityLevelConfiguration by default")
	assert.Equal(t, level.Name, schema.Spec.PriorityLevelConfiguration.Name)

	// The Lease is in kube-system (the chart's leaseNamespace).
	leases := "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
	// kube-apiserver's flow control picks a new FlowSchema up from its
	// informer, within a second or so.
	require.Eventually(t, func() bool {
		got, _ := classify(t, ctx, releaseUser, leases)
		return got == string(schema.UID)
	}, 30*time.Second, 200*time.Millisecond, "the guard's requests never came under the chart's FlowSchema %s", schema.UID)

	other := fmt.Sprintf("system:serviceaccount:%s:someone-else", releaseNamespace)
	cases := map[string]struct {
		user, path string
		guards     bool
	}{
		"the guard renewing its Lease (in kube-system)":              {releaseUser, leases, true},
		"the guard reading webhook configurations (cluster-scoped)":  {releaseUser, "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", true},
		"the guard reading kube-apiserver's /metrics (non-resource)": {releaseUser, "/metrics", true},
		"another ServiceAccount in the same namespace":               {other, leases, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			gotSchema, gotLevel := classify(t, ctx, c.user, c.path)
			require.NotEmpty(t, gotSchema, "no %s header", flowSchemaHeader)
			if c.guards {
				assert.Equal(t, string(schema.UID), gotSchema, "the FlowSchema")
				assert.Equal(t, string(level.UID), gotLevel, "the priority level")
			} else {
				assert.NotEqual(t, string(schema.UID), gotSchema, "the FlowSchema")
				assert.NotEqual(t, string(level.UID), gotLevel, "the priority level")
			}
		})
	}
}

// classify makes a GET of path as user (impersonated by the admin, with a
// ServiceAccount's groups) and returns the UIDs of the FlowSchema and the
// priority level kube-apiserver classified it in. The request may well be
// forbidden: flow control classifies it before authorization.
func classify(t *testing.T, ctx context.Context, user, path string) (flowSchema, priorityLevel string) {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNamespace, "system:authenticated"}}
	hc, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.Header.Get(flowSchemaHeader), resp.Header.Get(priorityLevelHeader)
}

// TestChart_guardPriorityIsOnByDefault: the chart's defaults give the
// guard its own FlowSchema and priority level and a critical priority
// class (DESIGN: tests run with the defaults a user gets); the values turn
// each off, and set the shares.
func TestChart_guardPriorityIsOnByDefault(t *testing.T) {
	cases := map[string]struct {
		args          []string
		flow          bool
		shares        float64
		priorityClass any
	}{
		"by default":        {nil, true, 10, "system-cluster-critical"},
		"with other shares": {[]string{"--set", "apiPriorityAndFairness.nominalConcurrencyShares=20"}, true, 20, "system-cluster-critical"},
		"turned off":        {[]string{"--set", "apiPriorityAndFairness.enabled=false,priorityClassName="}, false, 0, nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			objs := byKey(t, parseObjects(t, helmTemplate(t, c.args...)))
			schema, hasSchema := objs["FlowSchema /webhook-guard"]
			level, hasLevel := objs["PriorityLevelConfiguration /webhook-guard"]
			assert.Equal(t, c.flow, hasSchema, "the FlowSchema")
			assert.Equal(t, c.flow, hasLevel, "the PriorityLevelConfiguration")
			if c.flow {
				rule := schema["spec"].(object)["rules"].([]any)[0].(object)
				sa := rule["subjects"].([]any)[0].(object)["serviceAccount"].(object)
				assert.Equal(t, object{"name": "webhook-guard", "namespace": "default"}, sa, "the subject is the guard's ServiceAccount in the release's namespace")
				limited := level["spec"].(object)["limited"].(object)
				assert.Equal(t, c.shares, limited["nominalConcurrencyShares"])
				assert.Equal(t, float64(0), limited["lendablePercent"])
			}
			dep := objs["Deployment default/webhook-guard"]
			require.NotNil(t, dep)
			podSpec := dep["spec"].(object)["template"].(object)["spec"].(object)
			assert.Equal(t, c.priorityClass, podSpec["priorityClassName"])
		})
	}
}
