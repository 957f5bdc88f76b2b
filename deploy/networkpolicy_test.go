package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/yaml"
)

// readObjects reads the "---"-separated objects of a file into out, one
// per document, strictly (an unknown field fails).
func readObjects[T any](t *testing.T, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []T
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj T
		require.NoError(t, yaml.UnmarshalStrict(doc, &obj), path)
		out = append(out, obj)
	}
	return out
}

// managerPod is the base Deployment's pod template.
func managerPod(t *testing.T) corev1.PodTemplateSpec {
	t.Helper()
	deps := readObjects[appsv1.Deployment](t, filepath.Join(base, "deployment.yaml"))
	require.Len(t, deps, 1)
	return deps[0].Spec.Template
}

// staticAdmission is the kustomize Component that adds the webhook server.
const staticAdmission = "kustomize/components/static-admission"

// jsonPatch is one operation of a kustomize JSON 6902 patch file.
type jsonPatch struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

// patchValues decodes into T the value of every "add" of a JSON patch
// file whose path starts with prefix.
func patchValues[T any](t *testing.T, path, prefix string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var ops []jsonPatch
	require.NoError(t, yaml.UnmarshalStrict(data, &ops), path)
	var out []T
	for _, op := range ops {
		if op.Op != "add" || !strings.HasPrefix(op.Path, prefix) {
			continue
		}
		var v T
		require.NoError(t, yaml.UnmarshalStrict(op.Value, &v), "%s: %s", path, op.Path)
		out = append(out, v)
	}
	return out
}

// TestNetworkPolicy_admitsOnlyTheMetricsPortAndTheWebhookWhereItRuns: the
// policies select the guard's pods; in the base, ingress is open on the
// metrics port only (it serves /status too, authenticated), and
// components/static-admission opens the webhook port with the webhook
// server, named as its container port (a named port that matches no
// container port silently admits nothing); egress has DNS, the apiserver
// and a separate policy for the probed webhooks.
func TestNetworkPolicy_admitsOnlyTheMetricsPortAndTheWebhookWhereItRuns(t *testing.T) {
	pod := managerPod(t)
	containerPorts := sets.New[string]()
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			containerPorts.Insert(p.Name)
		}
	}
	policies := map[string]networkingv1.NetworkPolicy{}
	for _, np := range readObjects[networkingv1.NetworkPolicy](t, filepath.Join(base, "networkpolicy.yaml")) {
		policies[np.Name] = np
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		require.NoError(t, err)
		assert.False(t, sel.Empty(), "%s selects every pod in the namespace", np.Name)
		assert.True(t, sel.Matches(labels.Set(pod.Labels)), "%s does not select the guard's pods", np.Name)
		assert.Equal(t, "webhook-guard-system", np.Namespace, np.Name)
	}
	require.Contains(t, policies, "webhook-guard")
	require.Contains(t, policies, "webhook-guard-webhook-egress")

	main := policies["webhook-guard"]
	assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, main.Spec.PolicyTypes)
	ingress := sets.New[string]()
	for _, rule := range main.Spec.Ingress {
		for _, p := range rule.Ports {
			require.NotNil(t, p.Port)
			require.Equal(t, intstr.String, p.Port.Type, "ingress ports are named after the container's ports")
			ingress.Insert(p.Port.StrVal)
		}
	}
	assert.Equal(t, sets.New("metrics"), ingress, "ingress only to the metrics port: the default installation runs no webhook server")
	assert.True(t, containerPorts.IsSuperset(ingress), "the container names ports %v; the policy %v", sets.List(containerPorts), sets.List(ingress))
	assert.False(t, containerPorts.Has("webhook"), "the base runs no webhook server")
	for _, rule := range main.Spec.Ingress {
		assert.NotEmpty(t, rule.Ports, "an ingress rule without ports opens every port")
	}

	// components/static-admission: the webhook's container port, and
	// ingress to exactly that port.
	webhookPorts := patchValues[corev1.ContainerPort](t, filepath.Join(staticAdmission, "manager_webhook_patch.yaml"), "/spec/template/spec/containers/0/ports/")
	require.Len(t, webhookPorts, 1)
	assert.Equal(t, "webhook", webhookPorts[0].Name)
	assert.Contains(t, patchValues[string](t, filepath.Join(staticAdmission, "manager_webhook_patch.yaml"), "/spec/template/spec/containers/0/args/"),
		fmt.Sprintf("--webhook-port=%d", webhookPorts[0].ContainerPort), "the webhook server listens on the port the container names")
	rules := patchValues[networkingv1.NetworkPolicyIngressRule](t, filepath.Join(staticAdmission, "network_policy_patch.yaml"), "/spec/ingress/")
	require.Len(t, rules, 1)
	require.Len(t, rules[0].Ports, 1, "an ingress rule without ports opens every port")
	assert.Equal(t, intstr.FromString(webhookPorts[0].Name), *rules[0].Ports[0].Port, "ingress to the webhook's named port")
	assert.Empty(t, rules[0].From, "kube-apiserver is not a pod: no peer")

	egressPorts := sets.New[int32]()
	for _, rule := range main.Spec.Egress {
		require.NotEmpty(t, rule.Ports, "an egress rule of webhook-guard without ports: probe egress belongs in webhook-guard-webhook-egress")
		for _, p := range rule.Ports {
			egressPorts.Insert(p.Port.IntVal)
		}
	}
	assert.Equal(t, sets.New[int32](53, 443, 6443), egressPorts, "egress: DNS and the apiserver")

	probes := policies["webhook-guard-webhook-egress"]
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, probes.Spec.PolicyTypes,
		"the probe egress policy must not isolate ingress, so patching it cannot change what reaches the guard")
	assert.NotEmpty(t, probes.Spec.Egress)
}

// TestServiceMonitor_scrapesTheMetricsPort: the ServiceMonitor selects the
// base Service, scrapes the port that Service names "metrics" and that
// leads to the container's metrics port, over HTTPS with a bearer token,
// and the Deployment serves metrics there (--metrics-bind-address).
func TestServiceMonitor_scrapesTheMetricsPort(t *testing.T) {
	type endpoint struct {
		Port            string         `json:"port"`
		Path            string         `json:"path"`
		Scheme          string         `json:"scheme"`
		Interval        string         `json:"interval"`
		BearerTokenFile string         `json:"bearerTokenFile"`
		TLSConfig       map[string]any `json:"tlsConfig"`
	}
	type serviceMonitor struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			Selector  metav1.LabelSelector `json:"selector"`
			Endpoints []endpoint           `json:"endpoints"`
		} `json:"spec"`
	}
	sms := readObjects[serviceMonitor](t, filepath.Join(prometheusComponent, "servicemonitor.yaml"))
	require.Len(t, sms, 1)
	sm := sms[0]
	svcs := readObjects[corev1.Service](t, filepath.Join(base, "service.yaml"))
	require.Len(t, svcs, 1)
	svc := svcs[0]

	assert.Equal(t, svc.Namespace, sm.Namespace, "a ServiceMonitor selects Services in its own namespace")
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, sel.Matches(labels.Set(svc.Labels)), "the ServiceMonitor does not select the Service")
	require.Len(t, sm.Spec.Endpoints, 1)
	ep := sm.Spec.Endpoints[0]
	assert.Equal(t, "https", ep.Scheme, "the metrics server serves HTTPS only")
	assert.Equal(t, "/metrics", ep.Path)
	assert.Equal(t, "/var/run/secrets/kubernetes.io/serviceaccount/token", ep.BearerTokenFile, "scrapes are authenticated with Prometheus's token")

	var svcPort *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == ep.Port {
			svcPort = &svc.Spec.Ports[i]
		}
	}
	require.NotNil(t, svcPort, "the Service has no port named %q", ep.Port)
	pod := managerPod(t)
	var containerPort int32
	for _, p := range pod.Spec.Containers[0].Ports {
		if p.Name == svcPort.TargetPort.StrVal {
			containerPort = p.ContainerPort
		}
	}
	require.NotZero(t, containerPort, "the Service's port %s targets %q, which the container does not name", ep.Port, svcPort.TargetPort.StrVal)
	assert.Contains(t, pod.Spec.Containers[0].Args, fmt.Sprintf("--metrics-bind-address=:%d", containerPort),
		"the manager must serve metrics on the port the ServiceMonitor scrapes")
}
