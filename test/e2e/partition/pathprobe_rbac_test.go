package partition

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestPathProbeRBAC_grantsTheTargetsNamespaceOnly: what "guard manifests
// rbac" renders for a target's apiserverSignal.pathProbe.service, applied
// with kubectl to a real kube-apiserver, lets the guard's ServiceAccount
// GET through the service proxy of that Service, by the name RBAC sees,
// in the Service's namespace, and not through a Service of the same name
// and port in any other namespace: the grant is a Role there, since a
// ClusterRole's resourceNames name no namespace. The guard runs in a
// namespace of its own, as installed.
func TestPathProbeRBAC_grantsTheTargetsNamespaceOnly(t *testing.T) {
	ctx := context.Background()
	n := seq.Add(1)
	guardNS, targetNS, otherNS := fmt.Sprintf("pp-rbac-%d-guard", n), fmt.Sprintf("pp-rbac-%d-hooks", n), fmt.Sprintf("pp-rbac-%d-other", n)
	for _, ns := range []string{targetNS, otherNS} {
		require.NoError(t, env.EnsureNamespace(ctx, ns))
	}
	id, err := env.ServiceAccount(ctx, guardNS, "webhook-guard")
	require.NoError(t, err)
	const port = "8443"
	proxyName := "https:hook:" + port

	cfg := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: hook
  webhook: hook.example.com
  allowAdmissionWithoutMutation: true
  apiserverSignal:
    pathProbe:
      service: {namespace: `+targetNS+`, name: hook, port: `+port+`}
`), 0o600))
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	rendered, err := exec.CommandContext(ctx, bin, "manifests", "rbac", "--config", cfg, "--breaker", id.Username).Output()
	require.NoError(t, err, "guard manifests rbac")
	applied := env.Kubectl(ctx, "", rendered, "apply", "-f", "-")
	require.NoError(t, applied.Err, "kubectl apply:\n%s%s", applied.Stdout, applied.Stderr)
	t.Cleanup(func() { env.Kubectl(context.Background(), "", rendered, "delete", "--ignore-not-found", "-f", "-") })
	t.Logf("applied:\n%s", applied.Stdout)
	assert.Contains(t, applied.Stdout, "role.rbac.authorization.k8s.io/webhook-guard-path-probe created")
	assert.Contains(t, applied.Stdout, "rolebinding.rbac.authorization.k8s.io/webhook-guard-path-probe created")

	// kubectl auth can-i, as an operator asks it. kubectl exits 1 for
	// "no", so the answer is read from stdout.
	ask := func(args ...string) (bool, string) {
		r := env.Kubectl(ctx, "", nil, append(append([]string{"auth", "can-i"}, args...), "--as="+id.Username)...)
		answer := strings.Fields(r.Stdout)
		return len(answer) > 0 && answer[0] == "yes", r.Stdout + r.Stderr
	}
	proxyGet := func(ns, name string) []string {
		return []string{"get", "services/" + name, "--subresource=proxy", "-n", ns}
	}
	// The RBAC authorizer learns of new bindings from its informers.
	require.Eventually(t, func() bool { ok, _ := ask(proxyGet(targetNS, proxyName)...); return ok },
		30*time.Second, 100*time.Millisecond, "the rendered grant never took effect")

	cases := map[string]struct {
		args []string
		want bool
	}{
		"get through the proxy of the target's Service, in its namespace":      {proxyGet(targetNS, proxyName), true},
		"not through a Service of the same name and port in another namespace": {proxyGet(otherNS, proxyName), false},
		"not through a Service of the same name and port in its own namespace": {proxyGet(guardNS, proxyName), false},
		"not through a Service of the same name and port in kube-system":       {proxyGet("kube-system", proxyName), false},
		"not cluster-wide": {append(proxyGet(targetNS, proxyName)[:3], "--all-namespaces"), false},
		"not through another Service in the target's namespace": {proxyGet(targetNS, "https:other:"+port), false},
		"not through the target's Service on another port":      {proxyGet(targetNS, "https:hook:443"), false},
		"not through the proxy by no name":                      {[]string{"get", "services", "--subresource=proxy", "-n", targetNS}, false},
		"not write through the proxy of the target's Service":   {append([]string{"create"}, proxyGet(targetNS, proxyName)[1:]...), false},
		"not update the target's Service":                       {[]string{"update", "services/hook", "-n", targetNS}, false},
		"not list through the proxy in the target's namespace":  {[]string{"list", "services", "--subresource=proxy", "-n", targetNS}, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, out := ask(c.args...)
			assert.Equal(t, c.want, got, "kubectl auth can-i %s --as=%s said:\n%s", strings.Join(c.args, " "), id.Username, out)
		})
	}

	// And a real GET through the proxy, with the ServiceAccount's token:
	// Forbidden in the other namespace; in the target's, allowed (no
	// Service there answers, so it fails after authorization).
	guard, err := kubernetes.NewForConfig(id.Config)
	require.NoError(t, err)
	get := func(ns string) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return guard.CoreV1().Services(ns).ProxyGet("https", "hook", port, "/", nil).(*rest.Request).Do(ctx).Error()
	}
	err = get(otherNS)
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "GET through %s/%s: want Forbidden, got %v", otherNS, proxyName, err)
	err = get(targetNS)
	require.Error(t, err, "no Service %s/hook exists", targetNS)
	assert.False(t, apierrors.IsForbidden(err), "GET through %s/%s is allowed, and fails later: %v", targetNS, proxyName, err)
}
