package helm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/version"
)

// servedSince is the first Kubernetes minor version that serves each
// built-in apiVersion/kind the chart renders, at the apiVersion the chart
// uses: from Kubernetes' release notes and its deprecated API migration
// guide (kubernetes.io/docs/reference/using-api/deprecation-guide). The
// test below checks the entries against the real kube-apiserver of this
// package (1.37); test/e2e/helmnomap checks an apiserver without
// MutatingAdmissionPolicy.
var servedSince = map[string]string{
	"v1/ConfigMap":                       "1.0",
	"v1/Namespace":                       "1.0",
	"v1/Pod":                             "1.0",
	"v1/Service":                         "1.0",
	"v1/ServiceAccount":                  "1.0",
	"batch/v1/Job":                       "1.2",
	"networking.k8s.io/v1/NetworkPolicy": "1.7",
	"rbac.authorization.k8s.io/v1/ClusterRole":                         "1.8",
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding":                  "1.8",
	"rbac.authorization.k8s.io/v1/Role":                                "1.8",
	"rbac.authorization.k8s.io/v1/RoleBinding":                         "1.8",
	"apps/v1/Deployment":                                               "1.9",
	"policy/v1/PodDisruptionBudget":                                    "1.21",
	"flowcontrol.apiserver.k8s.io/v1/FlowSchema":                       "1.29",
	"flowcontrol.apiserver.k8s.io/v1/PriorityLevelConfiguration":       "1.29",
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy":        "1.30",
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding": "1.30",
	"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy":          "1.36",
	"admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding":   "1.36",
}

// fromCRDs are the kinds the chart renders only when asked to, whose
// definitions the Prometheus Operator and cert-manager install: served
// where they are installed, whatever the Kubernetes version.
var fromCRDs = []string{
	"monitoring.coreos.com/v1/ServiceMonitor",
	"monitoring.coreos.com/v1/PrometheusRule",
	"cert-manager.io/v1/Certificate",
	"cert-manager.io/v1/Issuer",
}

// everyOption are value sets that together render every template of the
// chart (certManager and staticAdmission exclude each other).
var everyOption = map[string][]string{
	"prometheus and cert-manager and own namespace": {"--set", "prometheus.enabled=true,certManager.enabled=true,namespace.name=guard,namespace.create=true"},
	"static admission": {"--set", "staticAdmission.enabled=true"},
}

// renderedKinds renders the chart with the example targets and args and
// returns the apiVersion/kind of each object.
func renderedKinds(t *testing.T, args ...string) []string {
	t.Helper()
	r := runHelm(t, append(append([]string{"template", "webhook-guard", chartDir}, exampleValues()...), args...)...)
	require.NoError(t, r.err, "helm template %v:\n%s", args, r.stderr)
	var kinds []string
	for _, obj := range parseObjects(t, r.stdout) {
		kinds = append(kinds, fmt.Sprintf("%s/%s", obj["apiVersion"], obj["kind"]))
	}
	require.NotEmpty(t, kinds)
	return kinds
}

// TestChart_rendersOnlyWhatEachVersionServes: "helm template
// --kube-version" renders, for each Kubernetes version the chart supports,
// only objects that version serves; the marking policies
// (MutatingAdmissionPolicy, 1.36) only where the cluster's APIs list them.
func TestChart_rendersOnlyWhatEachVersionServes(t *testing.T) {
	for _, kube := range []string{"1.30.0", "1.33.0", "1.37.0"} {
		for name, args := range everyOption {
			for _, marking := range []bool{false, true} {
				if marking && version.MustParseGeneric(kube).LessThan(version.MustParseGeneric("1.36.0")) {
					continue // no such cluster
				}
				t.Run(fmt.Sprintf("%s with %s and the marking API served %t", kube, name, marking), func(t *testing.T) {
					args := append([]string{"--kube-version", kube}, args...)
					if marking {
						args = append(args, servesMarking...)
					}
					kinds := renderedKinds(t, args...)
					for _, k := range kinds {
						if slices.Contains(fromCRDs, k) {
							continue
						}
						since, ok := servedSince[k]
						if !assert.True(t, ok, "%s: a kind the version table does not know; add it to servedSince", k) {
							continue
						}
						assert.False(t, version.MustParseGeneric(kube).LessThan(version.MustParseGeneric(since)),
							"%s is served since %s, rendered for %s", k, since, kube)
					}
					assert.Equal(t, marking, slices.Contains(kinds, "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"),
						"the marking policies render exactly where the API is served")
				})
			}
		}
	}
	t.Run("before 1.30, the chart refuses to render", func(t *testing.T) {
		r := runHelm(t, append(append([]string{"template", "webhook-guard", chartDir}, exampleValues()...), "--kube-version", "1.29.0")...)
		require.Error(t, r.err)
		assert.Contains(t, r.stderr, "kubeVersion")
	})
}

// TestChart_versionTableAgreesWithTheAPIServer: every kind of servedSince
// that this package's kube-apiserver should serve, it serves; and the chart
// rendered with that apiserver's own APIs (as helm install sees them)
// renders only kinds it serves, the CRDs' aside.
func TestChart_versionTableAgreesWithTheAPIServer(t *testing.T) {
	served, err := env.ServedKinds()
	require.NoError(t, err)
	info, err := env.Clientset.Discovery().ServerVersion()
	require.NoError(t, err)
	kube := version.MustParseGeneric(info.GitVersion)
	for k, since := range servedSince {
		if !kube.LessThan(version.MustParseGeneric(since)) {
			assert.Contains(t, served, k, "the table says %s is served since %s; kube-apiserver %s does not serve it", k, since, info.GitVersion)
		}
	}
	for name, args := range everyOption {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"--kube-version", info.GitVersion, "--api-versions", strings.Join(served, ",")}, args...)
			for _, k := range renderedKinds(t, args...) {
				if !slices.Contains(fromCRDs, k) {
					assert.Contains(t, served, k, "rendered for %s, which does not serve it", info.GitVersion)
				}
			}
		})
	}
}
