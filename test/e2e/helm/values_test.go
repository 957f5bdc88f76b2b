package helm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tunedValues sets every tuning value of the chart away from
// its default at once.
const tunedValues = `
image:
  registry: registry.example.com/platform
  tag: v9.9.9
imagePullSecrets: [{name: regcred}]
commonLabels: {team: platform}
podLabels: {cost-center: "42"}
podAnnotations: {example.com/scrape: "false"}
nodeSelector: {node-role.kubernetes.io/infra: ""}
tolerations:
- {key: infra, operator: Exists, effect: NoSchedule}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: DoNotSchedule
  labelSelector: {matchLabels: {app.kubernetes.io/name: webhook-guard}}
podSecurityContext:
  # As on OpenShift's restricted-v2: null removes a default.
  runAsUser: null
  runAsGroup: null
containerSecurityContext:
  runAsNonRoot: true
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
extraArgs: ["--zap-log-level=debug", "--leader-election-lease-duration=30s"]
extraEnv: [{name: HTTPS_PROXY, value: "http://127.0.0.1:3128"}]
resources:
  requests: {cpu: 50m, memory: 128Mi}
  limits: {cpu: "1", memory: 512Mi}
replicas: 3
podDisruptionBudget: {minAvailable: 2, unhealthyPodEvictionPolicy: IfHealthyBudget}
networkPolicy: {apiserverPorts: [8443]}
priorityClassName: platform-critical
`

// TestChart_everyTuningValueAtOnce renders the chart with every tuning
// value set and checks that each lands where it should, and nowhere else:
// the selectors keep their own labels only.
func TestChart_everyTuningValueAtOnce(t *testing.T) {
	objs := byKey(t, parseObjects(t, helmTemplate(t, "--namespace", "webhook-guard-system", "-f", valuesFile(t, tunedValues))))
	dep := objs["Deployment webhook-guard-system/webhook-guard"]
	require.NotNil(t, dep)
	spec := dep["spec"].(object)
	assert.EqualValues(t, 3, spec["replicas"])
	assert.Equal(t, object{"app.kubernetes.io/name": "webhook-guard", "app.kubernetes.io/component": "manager"},
		spec["selector"].(object)["matchLabels"], "selectors use the object's own labels only")
	tmpl := spec["template"].(object)
	meta := tmpl["metadata"].(object)
	assert.Equal(t, "42", meta["labels"].(object)["cost-center"])
	assert.Equal(t, "false", meta["annotations"].(object)["example.com/scrape"])
	pod := tmpl["spec"].(object)
	assert.Equal(t, []any{object{"name": "regcred"}}, pod["imagePullSecrets"])
	assert.Equal(t, object{"node-role.kubernetes.io/infra": ""}, pod["nodeSelector"])
	assert.Equal(t, "infra", pod["tolerations"].([]any)[0].(object)["key"])
	assert.Contains(t, pod["affinity"].(object), "nodeAffinity")
	assert.Equal(t, "topology.kubernetes.io/zone", pod["topologySpreadConstraints"].([]any)[0].(object)["topologyKey"])
	assert.Equal(t, object{"runAsNonRoot": true, "seccompProfile": object{"type": "RuntimeDefault"}}, pod["securityContext"],
		"no fixed runAsUser when the platform assigns one")
	assert.Equal(t, "platform-critical", pod["priorityClassName"])
	c := pod["containers"].([]any)[0].(object)
	assert.Equal(t, "registry.example.com/platform/webhook-guard:v9.9.9", c["image"])
	args := c["args"].([]any)
	assert.Equal(t, []any{"--zap-log-level=debug", "--leader-election-lease-duration=30s"}, args[len(args)-2:], "extraArgs come last")
	assert.Contains(t, c["env"], object{"name": "HTTPS_PROXY", "value": "http://127.0.0.1:3128"})
	assert.Equal(t, object{"cpu": "1", "memory": "512Mi"}, c["resources"].(object)["limits"])
	assert.Equal(t, false, c["securityContext"].(object)["allowPrivilegeEscalation"])

	for k, obj := range objs {
		labels, _ := obj["metadata"].(object)["labels"].(object)
		assert.Equal(t, "platform", labels["team"], "%s: commonLabels", k)
	}

	pdb := objs["PodDisruptionBudget webhook-guard-system/webhook-guard"]
	require.NotNil(t, pdb)
	assert.EqualValues(t, 2, pdb["spec"].(object)["minAvailable"])
	assert.Equal(t, "IfHealthyBudget", pdb["spec"].(object)["unhealthyPodEvictionPolicy"])

	np := objs["NetworkPolicy webhook-guard-system/webhook-guard"]
	require.NotNil(t, np)
	egress := np["spec"].(object)["egress"].([]any)
	assert.Equal(t, []any{object{"port": float64(8443), "protocol": "TCP"}}, egress[len(egress)-1].(object)["ports"], "the apiserver's port")
}

// The PDB exists only over more than one replica, unless set; the
// NetworkPolicies go when networkPolicy.enabled is false.
func TestChart_pdbAndNetworkPolicyFollowTheirValues(t *testing.T) {
	const pdb, np = "PodDisruptionBudget webhook-guard-system/webhook-guard", "NetworkPolicy webhook-guard-system/webhook-guard"
	for name, tc := range map[string]struct {
		args    []string
		pdb, np bool
	}{
		"default: two replicas":   {nil, true, true},
		"one replica":             {[]string{"--set", "replicas=1"}, false, true},
		"one replica, PDB forced": {[]string{"--set", "replicas=1,podDisruptionBudget.enabled=true"}, true, true},
		"two replicas, PDB off":   {[]string{"--set", "podDisruptionBudget.enabled=false"}, false, true},
		"no NetworkPolicy":        {[]string{"--set", "networkPolicy.enabled=false"}, true, false},
	} {
		t.Run(name, func(t *testing.T) {
			objs := byKey(t, parseObjects(t, helmTemplate(t, append([]string{"--namespace", "webhook-guard-system"}, tc.args...)...)))
			assert.Equal(t, tc.pdb, objs[pdb] != nil, "PDB")
			assert.Equal(t, tc.np, objs[np] != nil, "NetworkPolicy")
			assert.Equal(t, tc.np, objs["NetworkPolicy webhook-guard-system/webhook-guard-webhook-egress"] != nil, "the egress NetworkPolicy")
			if objs[pdb] != nil {
				assert.Equal(t, "AlwaysAllow", objs[pdb]["spec"].(object)["unhealthyPodEvictionPolicy"])
			}
		})
	}
}

// The schema refuses a tuning value of the wrong shape, as it refuses an
// unknown one.
func TestChart_schemaRefusesMisshapenTuning(t *testing.T) {
	for name, set := range map[string]string{
		"an extraArg that is no flag":      "extraArgs[0]=debug",
		"a port out of range":              "networkPolicy.apiserverPorts[0]=70000",
		"an unknown PDB field":             "podDisruptionBudget.maxUnavailable=1",
		"an unknown eviction policy":       "podDisruptionBudget.unhealthyPodEvictionPolicy=Never",
		"a pull secret without a name":     "imagePullSecrets[0].key=x",
		"two names in one SAN":             "staticAdmission.certExtraSANs[0]=a.example.com b.example.com",
		"an unknown staticAdmission field": "staticAdmission.port=9443",
	} {
		t.Run(name, func(t *testing.T) {
			r := runHelm(t, append(append([]string{"template", "webhook-guard", chartDir}, exampleValues()...), "--set", set)...)
			assert.Error(t, r.err, "helm template accepted %s", set)
			assert.Contains(t, r.stderr, "values don't meet the specifications of the schema")
		})
	}
}

// kube-prometheus-stack selects ServiceMonitors and PrometheusRules by the
// label release: <its release>; the chart puts the labels given on each,
// and the scrape settings on the ServiceMonitor's endpoint.
func TestChart_prometheusObjectsCarryTheSelectorLabels(t *testing.T) {
	objs := byKey(t, parseObjects(t, helmTemplate(t, "--namespace", "webhook-guard-system", "-f", valuesFile(t, `
prometheus:
  enabled: true
  serviceMonitor:
    labels: {release: kube-prometheus-stack}
    interval: 15s
    scrapeTimeout: 10s
    relabelings: [{targetLabel: cluster, replacement: prod-1}]
  prometheusRule:
    labels: {release: kube-prometheus-stack}
`))))
	sm := objs["ServiceMonitor webhook-guard-system/webhook-guard"]
	require.NotNil(t, sm)
	assert.Equal(t, "kube-prometheus-stack", sm["metadata"].(object)["labels"].(object)["release"])
	endpoint := sm["spec"].(object)["endpoints"].([]any)[0].(object)
	assert.Equal(t, "15s", endpoint["interval"])
	assert.Equal(t, "10s", endpoint["scrapeTimeout"])
	assert.Equal(t, []any{object{"targetLabel": "cluster", "replacement": "prod-1"}}, endpoint["relabelings"])
	rule := objs["PrometheusRule webhook-guard-system/webhook-guard"]
	require.NotNil(t, rule)
	assert.Equal(t, "kube-prometheus-stack", rule["metadata"].(object)["labels"].(object)["release"])
}

// TestChart_servesMetricsWithACertificatePrometheusVerifies: where the
// chart has a CA (certManager.enabled: cert-manager's Secret;
// staticAdmission.enabled: the service's own), the guard serves metrics
// with a certificate of it, and the ServiceMonitor verifies it against the
// Secret's ca.crt for the Service's name, with no insecureSkipVerify. Only
// the default, which has no CA, skips verification.
func TestChart_servesMetricsWithACertificatePrometheusVerifies(t *testing.T) {
	const ns = "guard"
	serverName := "webhook-guard." + ns + ".svc"
	cases := map[string]struct {
		set string
		// secret is the Secret whose ca.crt verifies the metrics
		// certificate; empty: none, insecureSkipVerify.
		secret string
	}{
		"the default: no CA, so no verification": {set: "prometheus.enabled=true"},
		"cert-manager: its Secret":               {set: "prometheus.enabled=true,certManager.enabled=true", secret: "webhook-guard-serving-cert"},
		"static admission: the service's own CA": {set: "prometheus.enabled=true,staticAdmission.enabled=true", secret: "webhook-guard-certs"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := byKey(t, parseObjects(t, helmTemplate(t, "--namespace", ns, "--set", tc.set)))
			sm := objs["ServiceMonitor "+ns+"/webhook-guard"]
			require.NotNil(t, sm)
			tlsConfig := sm["spec"].(object)["endpoints"].([]any)[0].(object)["tlsConfig"].(object)
			assert.Equal(t, serverName, tlsConfig["serverName"])

			c := objs["Deployment "+ns+"/webhook-guard"]["spec"].(object)["template"].(object)["spec"].(object)["containers"].([]any)[0].(object)
			metricsCertDir := ""
			for _, a := range c["args"].([]any) {
				if v, ok := strings.CutPrefix(a.(string), "--metrics-cert-dir="); ok {
					metricsCertDir = v
				}
			}
			if tc.secret == "" {
				assert.Equal(t, object{"serverName": serverName, "insecureSkipVerify": true}, tlsConfig)
				assert.Empty(t, metricsCertDir, "no CA: controller-runtime's self-signed certificate")
				return
			}
			assert.Equal(t, object{"serverName": serverName, "ca": object{"secret": object{"name": tc.secret, "key": "ca.crt"}}}, tlsConfig,
				"verified against the CA, no insecureSkipVerify")
			require.NotEmpty(t, metricsCertDir, "the guard serves metrics with a certificate of that CA")

			// The folder the metrics are served from holds that Secret's
			// certificate: cert-manager's Secret mounted there, or the
			// webhook's cert dir that the service fills from its Secret.
			if tc.secret == "webhook-guard-certs" {
				assert.Contains(t, c["args"], "--webhook-cert-dir="+metricsCertDir)
				assert.Contains(t, c["args"], "--cert-secret="+tc.secret)
				assert.Contains(t, c["args"], "--cert-service-name=webhook-guard", "the certificate is valid for %s", serverName)
				return
			}
			var volume string
			for _, m := range c["volumeMounts"].([]any) {
				if m.(object)["mountPath"] == metricsCertDir {
					volume = m.(object)["name"].(string)
				}
			}
			require.NotEmpty(t, volume, "nothing is mounted at --metrics-cert-dir=%s", metricsCertDir)
			pod := objs["Deployment "+ns+"/webhook-guard"]["spec"].(object)["template"].(object)["spec"].(object)
			assert.Contains(t, pod["volumes"], object{"name": volume, "secret": object{"secretName": tc.secret}})
			cert := objs["Certificate "+ns+"/webhook-guard-serving"]
			require.NotNil(t, cert)
			assert.Equal(t, tc.secret, cert["spec"].(object)["secretName"])
			assert.Contains(t, cert["spec"].(object)["dnsNames"], serverName, "the Certificate is valid for the name Prometheus verifies")
		})
	}
}

// TestChart_staticAdmissionIsOffByDefault: the default chart runs no
// admission webhook server and grants nothing on Secrets; staticAdmission
// turns on the server, its ports and its certificate Secret's Role
// together, and refuses cert-manager beside it.
func TestChart_staticAdmissionIsOffByDefault(t *testing.T) {
	const ns = "webhook-guard-system"
	for name, tc := range map[string]struct {
		set string
		on  bool
	}{
		"by default, off":  {set: "", on: false},
		"when enabled, on": {set: "staticAdmission.enabled=true", on: true},
	} {
		t.Run(name, func(t *testing.T) {
			args := []string{"--namespace", ns}
			if tc.set != "" {
				args = append(args, "--set", tc.set)
			}
			out := helmTemplate(t, args...)
			objs := byKey(t, parseObjects(t, out))
			assert.Equal(t, tc.on, objs["Role "+ns+"/webhook-guard-certs"] != nil, "the Role on the certificate Secret")
			assert.Equal(t, tc.on, objs["RoleBinding "+ns+"/webhook-guard-certs"] != nil, "its binding")
			assert.Equal(t, tc.on, objs["Service "+ns+"/webhook-guard-static"] != nil, "the NodePort")
			for k, obj := range objs {
				role, _ := obj["rules"].([]any)
				for _, r := range role {
					if resources, _ := r.(object)["resources"].([]any); slices.Contains(resources, any("secrets")) {
						assert.True(t, tc.on, "%s grants something on Secrets", k)
						assert.Equal(t, "Role "+ns+"/webhook-guard-certs", k, "only the certificate Role touches Secrets")
					}
				}
			}
			c := objs["Deployment "+ns+"/webhook-guard"]["spec"].(object)["template"].(object)["spec"].(object)["containers"].([]any)[0].(object)
			assert.Equal(t, tc.on, slices.Contains(c["args"].([]any), any("--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs")), "the webhook server")
			assert.Equal(t, tc.on, slices.ContainsFunc(c["ports"].([]any), func(p any) bool { return p.(object)["name"] == "webhook" }), "the container's webhook port")
			svc := objs["Service "+ns+"/webhook-guard"]["spec"].(object)
			assert.Equal(t, tc.on, slices.ContainsFunc(svc["ports"].([]any), func(p any) bool { return p.(object)["name"] == "webhook" }), "the Service's webhook port")
			np := objs["NetworkPolicy "+ns+"/webhook-guard"]["spec"].(object)
			assert.Equal(t, tc.on, strings.Contains(fmt.Sprint(np["ingress"]), "port:webhook"), "ingress to the webhook port")
		})
	}
	r := runHelm(t, append(append([]string{"template", "webhook-guard", chartDir}, exampleValues()...), "--set", "staticAdmission.enabled=true,certManager.enabled=true")...)
	require.Error(t, r.err, "static admission with cert-manager's self-signed CA")
	assert.Contains(t, r.stderr, "staticAdmission.enabled and certManager.enabled exclude each other")
}
