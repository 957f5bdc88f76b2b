package helm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/rbac"
)

// chartLabels are the labels the chart puts on every object beside the
// object's own (templates/_helpers.tpl).
var chartLabels = []string{"app.kubernetes.io/part-of", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}

// object is one Kubernetes object as JSON would decode it.
type object = map[string]any

// parseObjects splits a multi-document YAML stream into its objects.
func parseObjects(t *testing.T, stream string) []object {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var out []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		var obj object
		require.NoError(t, yaml.Unmarshal(doc, &obj))
		if len(obj) > 0 {
			out = append(out, obj)
		}
	}
}

// key names an object: kind namespace/name.
func key(obj object) string {
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	return obj["kind"].(string) + " " + ns + "/" + name
}

func byKey(t *testing.T, objs []object) map[string]object {
	t.Helper()
	out := map[string]object{}
	for _, obj := range objs {
		k := key(obj)
		require.NotContains(t, out, k, "two objects %s", k)
		out[k] = obj
	}
	return out
}

// kustomizeBuild runs the real kustomize on an overlay of deploy/kustomize.
func kustomizeBuild(t *testing.T, overlay string) string {
	t.Helper()
	r := env.Kustomize(context.Background(), "build", filepath.Join(root, "deploy", "kustomize", "overlays", overlay))
	require.NoError(t, r.Err, "kustomize build %s:\n%s", overlay, r.Stderr)
	return r.Stdout
}

// servesMarking are the helm template arguments of a cluster that serves
// MutatingAdmissionPolicy (1.36 or later): helm install reads it from the
// cluster's discovery, helm template only from --api-versions.
var servesMarking = []string{"--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}

// helmTemplate renders the chart with the example targets and args for a
// cluster that serves marking, failing the test on any error or any output
// on stderr.
func helmTemplate(t *testing.T, args ...string) string {
	t.Helper()
	r := runHelm(t, append(append(append([]string{"template", "webhook-guard", chartDir}, servesMarking...), exampleValues()...), args...)...)
	require.NoError(t, r.err, "helm template:\n%s", r.stderr)
	assert.Empty(t, r.stderr, "helm template wrote to stderr")
	return r.stdout
}

func TestChart_lintAndTemplateAreClean(t *testing.T) {
	cases := map[string][]string{
		"with the example targets":                        nil,
		"with cert-manager":                               {"--set", "certManager.enabled=true"},
		"with static admission":                           {"--set", "staticAdmission.enabled=true,staticAdmission.certExtraSANs={guard.example.com,10.0.0.1}"},
		"with the Prometheus component":                   {"--set", "prometheus.enabled=true"},
		"with a namespace of its own, created":            {"--set", "namespace.name=guard,namespace.create=true"},
		"without marking (clusters before 1.36)":          {"--set", "marking.enabled=false"},
		"with an image pinned by digest and replicas":     {"--set", "image.repository=registry.example.com/guard,image.digest=sha256:" + strings.Repeat("ab", 32) + ",replicas=3"},
		"without the guard's own flow and priority class": {"--set", "apiPriorityAndFairness.enabled=false,priorityClassName="},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			assertLintsClean(t, append(exampleValues(), args...)...)
			objs := parseObjects(t, helmTemplate(t, args...))
			assert.NotEmpty(t, objs)
		})
	}
}

// TestChart_rendersWhatKustomizeInstalls: the chart with the example
// targets renders, object by object, what each kustomize overlay builds,
// apart from these, each on purpose:
//   - labels: the chart adds its own (chartLabels) beside every label the
//     overlay sets;
//   - the ConfigMap webhook-guard-config: kustomize suffixes its name with a
//     hash of its content, the chart keeps the name and rolls the pods with
//     a checksum annotation instead; its config.yaml is the same
//     configuration (comments aside);
//   - the guard policy (ValidatingAdmissionPolicy and binding
//     webhook-guard): the chart leaves it to the service, which creates it
//     at start (README "Install with Helm" says why).
func TestChart_rendersWhatKustomizeInstalls(t *testing.T) {
	namespaced := []string{"--namespace", "default", "--set", "namespace.name=webhook-guard-system,namespace.create=true"}
	cases := map[string][]string{
		"default":            nil,
		"cert-manager":       {"--set", "certManager.enabled=true"},
		"static-admission":   {"--set", "staticAdmission.enabled=true,staticAdmission.certExtraSANs={webhook-guard.control-plane.example}"},
		"default-prometheus": {"--set", "prometheus.enabled=true"},
	}
	hashed := regexp.MustCompile(`\bwebhook-guard-config-[a-z0-9]{10}\b`)
	for overlay, args := range cases {
		t.Run(overlay, func(t *testing.T) {
			built := hashed.ReplaceAllString(kustomizeBuild(t, overlay), "webhook-guard-config")
			want := byKey(t, parseObjects(t, built))
			got := byKey(t, parseObjects(t, helmTemplate(t, append(namespaced, args...)...)))
			// The pre-delete hook's objects (templates/release_hook.yaml)
			// are the chart's own: kustomize users run guard release by hand.
			var hooks, tests []string
			for k, obj := range got {
				annotations, _ := obj["metadata"].(object)["annotations"].(object)
				switch annotations["helm.sh/hook"] {
				case "pre-delete":
					hooks = append(hooks, k)
					delete(got, k)
				case "test":
					tests = append(tests, k)
					delete(got, k)
				}
			}
			assert.ElementsMatch(t, []string{
				"ServiceAccount webhook-guard-system/webhook-guard-release", "ClusterRole /webhook-guard-release", "ClusterRoleBinding /webhook-guard-release",
				"Role webhook-guard-system/webhook-guard-release", "RoleBinding webhook-guard-system/webhook-guard-release", "Job webhook-guard-system/webhook-guard-release",
			}, hooks, "the pre-delete hook's objects")
			// The helm test's objects (templates/tests) are the chart's own too.
			assert.ElementsMatch(t, []string{
				"ServiceAccount webhook-guard-system/webhook-guard-test", "RoleBinding webhook-guard-system/webhook-guard-test", "RoleBinding kube-system/webhook-guard-test-events",
				"ClusterRoleBinding /webhook-guard-test", "Pod webhook-guard-system/webhook-guard-test",
			}, tests, "the helm test's objects")

			// Both ship the guard policy, from the guard's one rendering;
			// TestChart_guardPolicyIsGuardManifestsPolicy compares the chart's
			// with it (kustomize's carries the digest older versions read).
			for _, k := range []string{"ValidatingAdmissionPolicy /webhook-guard", "ValidatingAdmissionPolicyBinding /webhook-guard"} {
				require.Contains(t, want, k, "the overlay no longer ships the guard policy")
				require.Contains(t, got, k, "the chart no longer ships the guard policy")
				delete(want, k)
				delete(got, k)
			}
			dep := got["Deployment webhook-guard-system/webhook-guard"]
			require.NotNil(t, dep)
			annotations := dep["spec"].(object)["template"].(object)["metadata"].(object)["annotations"].(object)
			assert.NotEmpty(t, annotations["checksum/config"], "the pods must roll when the configuration changes")
			delete(annotations, "checksum/config")
			// The order of named volumes means nothing.
			for _, d := range []object{dep, want["Deployment webhook-guard-system/webhook-guard"]} {
				podSpec := d["spec"].(object)["template"].(object)["spec"].(object)
				volumes := podSpec["volumes"].([]any)
				slices.SortFunc(volumes, func(a, b any) int {
					return strings.Compare(a.(object)["name"].(string), b.(object)["name"].(string))
				})
			}

			assert.ElementsMatch(t, slices.Collect(maps.Keys(want)), slices.Collect(maps.Keys(got)), "the chart renders other objects than kustomize builds")
			for k, w := range want {
				g, ok := got[k]
				if !ok {
					continue
				}
				wantLabels, gotLabels := takeLabels(w), takeLabels(g)
				for name, value := range wantLabels {
					assert.Equal(t, value, gotLabels[name], "%s: label %s", k, name)
				}
				for name := range gotLabels {
					if _, ok := wantLabels[name]; !ok {
						assert.Contains(t, chartLabels, name, "%s: the chart adds label %s", k, name)
					}
				}
				if k == "ConfigMap webhook-guard-system/webhook-guard-config" {
					assert.Equal(t, configOf(t, w), configOf(t, g), "the guard's configuration differs")
				}
				assert.Equal(t, w, g, "%s differs (labels and configuration aside)", k)
			}
		})
	}
}

// takeLabels removes and returns obj's metadata.labels.
func takeLabels(obj object) map[string]any {
	meta := obj["metadata"].(object)
	labels, _ := meta["labels"].(object)
	delete(meta, "labels")
	return labels
}

// configOf removes and returns the parsed config.yaml of a ConfigMap.
func configOf(t *testing.T, cm object) object {
	t.Helper()
	data := cm["data"].(object)
	var cfg object
	require.NoError(t, yaml.Unmarshal([]byte(data["config.yaml"].(string)), &cfg))
	delete(data, "config.yaml")
	return cfg
}

// TestChart_targetsRoleIsGuardManifestsRbac: the chart renders the
// ClusterRole webhook-guard-targets, and the path probe's Role and
// RoleBinding in each namespace of a pathProbe.service, itself, from the
// targets; they must be exactly what "guard manifests rbac --breaker
// system:serviceaccount:<the release's namespace>:webhook-guard" renders
// (internal/rbac Render) for the same configuration, labels aside.
func TestChart_targetsRoleIsGuardManifestsRbac(t *testing.T) {
	header := "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\n"
	example, err := os.ReadFile(filepath.Join(root, exampleTargets, "config.yaml"))
	require.NoError(t, err)
	cases := map[string]string{
		"the example targets": string(example),
		"one mutating target": header + `targets:
- {configuration: one, webhook: a.example.com, allowAdmissionWithoutMutation: true}
`,
		"only validating targets, one configuration twice": header + `targets:
- {kind: Validating, configuration: zeta, webhook: a.example.com, allowAdmissionWithoutValidation: true}
- {kind: Validating, configuration: alpha, webhook: b.example.com, allowAdmissionWithoutValidation: true}
- {kind: Validating, configuration: zeta, webhook: c.example.com, allowAdmissionWithoutValidation: true}
`,
		"a path probe of the main installation": header + `targets:
- {configuration: one, webhook: a.example.com, allowAdmissionWithoutMutation: true, apiserverSignal: {pathProbe: {service: {namespace: hooks, name: one}}}}
`,
		"path probes with and without a port, one turned off, one name in two namespaces, and an instance": header + `instance: canary
holdWhenAllFail: 0
targets:
- configuration: b-mutator
  webhook: b.example.com
  allowAdmissionWithoutMutation: true
  apiserverSignal: {pathProbe: {service: {namespace: b, name: b-svc}}}
- configuration: a-mutator
  webhook: a.example.com
  allowAdmissionWithoutMutation: true
  apiserverSignal: {pathProbe: {service: {namespace: a, name: a-svc, port: 8443}}}
- configuration: quiet
  webhook: quiet.example.com
  allowAdmissionWithoutMutation: true
  apiserverSignal: {enabled: false, pathProbe: {service: {namespace: q, name: quiet-svc}}}
- kind: Validating
  configuration: a-mutator
  webhook: v.example.com
  allowAdmissionWithoutValidation: true
  apiserverSignal: {pathProbe: {service: {namespace: b, name: b-svc, port: 443}}}
- kind: Validating
  configuration: other
  webhook: same-name.example.com
  allowAdmissionWithoutValidation: true
  apiserverSignal: {pathProbe: {service: {namespace: c, name: b-svc}}}
`,
	}
	for name, cfgYAML := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(cfgYAML))
			require.NoError(t, err, "the case must be a valid GuardConfiguration")
			const namespace = "guard-ns"
			want := map[string]object{}
			for _, obj := range rbac.Render(cfg, "system:serviceaccount:"+namespace+":webhook-guard") {
				data, err := yaml.Marshal(obj)
				require.NoError(t, err)
				var o object
				require.NoError(t, yaml.Unmarshal(data, &o))
				takeLabels(o)
				delete(o["metadata"].(object), "creationTimestamp")
				want[key(o)] = o
			}

			values := valuesFile(t, cfgYAML)
			r := runHelm(t, "template", "webhook-guard", chartDir, "-f", values, "--namespace", namespace, "--set", "marking.enabled=false", "--show-only", "templates/targets_role.yaml")
			require.NoError(t, r.err, r.stderr)
			got := byKey(t, parseObjects(t, r.stdout))
			for k, o := range got {
				// The chart's own labels beside those internal/rbac puts.
				labels := takeLabels(o)
				for name, value := range rbac.Labels() {
					assert.Equal(t, value, labels[name], "%s: label %s", k, name)
				}
				// Every object decodes strictly as what it says it is.
				data, err := yaml.Marshal(o)
				require.NoError(t, err)
				switch o["kind"] {
				case "ClusterRole":
					require.NoError(t, yaml.UnmarshalStrict(data, &rbacv1.ClusterRole{}))
				case "Role":
					require.NoError(t, yaml.UnmarshalStrict(data, &rbacv1.Role{}))
				case "RoleBinding":
					require.NoError(t, yaml.UnmarshalStrict(data, &rbacv1.RoleBinding{}))
				default:
					t.Errorf("the template renders a %s", o["kind"])
				}
			}
			assert.Equal(t, want, got)
		})
	}
}

// refusal is values the chart must refuse, and what the refusal must say.
type refusal struct {
	values string
	want   []string
	// guardRefuses: the values are a GuardConfiguration the guard itself
	// refuses too (the chart is not stricter than the guard).
	guardRefuses bool
}

// TestChart_refusesWhatTheGuardRefuses: values.schema.json refuses a
// target without its approval, and the configuration errors the guard
// refuses at start, with a message that names the field, before anything
// is installed.
func TestChart_refusesWhatTheGuardRefuses(t *testing.T) {
	header := "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\n"
	cases := map[string]refusal{
		"a mutating target without allowAdmissionWithoutMutation": {header + "targets:\n- {configuration: m, webhook: m.example.com}\n",
			[]string{"/targets/0", "allowAdmissionWithoutMutation"}, true},
		"a mutating target with allowAdmissionWithoutMutation false": {header + "targets:\n- {configuration: m, webhook: m.example.com, allowAdmissionWithoutMutation: false}\n",
			[]string{"/targets/0/allowAdmissionWithoutMutation", "true"}, true},
		"a validating target without allowAdmissionWithoutValidation": {header + "targets:\n- {kind: Validating, configuration: v, webhook: v.example.com, allowAdmissionWithoutMutation: true}\n",
			[]string{"/targets/0", "allowAdmissionWithoutValidation"}, true},
		"a misspelled field": {header + "targets:\n- {configuration: m, webhook: m.example.com, allowAdmissionWithoutMutation: true, opnAfter: 2}\n",
			[]string{"opnAfter"}, true},
		"openAfter 0": {header + "targets:\n- {configuration: m, webhook: m.example.com, allowAdmissionWithoutMutation: true, openAfter: 0}\n",
			[]string{"/targets/0/openAfter"}, true},
		"an unknown mode": {header + "targets:\n- {configuration: m, webhook: m.example.com, allowAdmissionWithoutMutation: true, mode: Open}\n",
			[]string{"/targets/0/mode"}, true},
		"a configuration name that is no DNS subdomain": {header + "targets:\n- {configuration: My_Config, webhook: m.example.com, allowAdmissionWithoutMutation: true}\n",
			[]string{"/targets/0/configuration"}, true},
		"holdWhenAllFail 1": {header + "holdWhenAllFail: 1\ntargets:\n- {configuration: m, webhook: m.example.com, allowAdmissionWithoutMutation: true}\n",
			[]string{"/holdWhenAllFail"}, true},
		"an interval that is no duration": {header + "targets:\n- {configuration: m, webhook: m.example.com, allowAdmissionWithoutMutation: true, probe: {interval: soon}}\n",
			[]string{"/targets/0/probe/interval"}, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if c.guardRefuses {
				_, err := config.Parse([]byte(c.values))
				require.Error(t, err, "the guard accepts these values; the chart must not refuse them")
			}
			values := valuesFile(t, c.values)
			r := runHelm(t, "template", "webhook-guard", chartDir, "-f", values, "--set", "marking.enabled=false")
			require.Error(t, r.err, "helm template accepted:\n%s", c.values)
			for _, want := range c.want {
				assert.Contains(t, r.stderr, want)
			}
			t.Logf("helm said: %s", strings.TrimSpace(r.stderr))
		})
	}

	t.Run("an Observe target needs no approval, for the guard and the chart", func(t *testing.T) {
		observe := header + "targets:\n- {configuration: m, webhook: m.example.com, mode: Observe}\n- {kind: Validating, configuration: v, webhook: v.example.com, mode: Observe}\n"
		_, err := config.Parse([]byte(observe))
		require.NoError(t, err)
		for _, extra := range [][]string{nil, {"--skip-schema-validation"}} {
			args := append([]string{"template", "webhook-guard", chartDir, "-f", valuesFile(t, observe), "--set", "marking.enabled=false"}, extra...)
			r := runHelm(t, args...)
			require.NoError(t, r.err, "%v: %s", extra, r.stderr)
		}
	})

	t.Run("without the schema the templates still refuse an unapproved target in the guard's words", func(t *testing.T) {
		values := valuesFile(t, header+"targets:\n- {configuration: m, webhook: m.example.com}\n")
		r := runHelm(t, "template", "webhook-guard", chartDir, "-f", values, "--set", "marking.enabled=false", "--skip-schema-validation")
		require.Error(t, r.err)
		assert.Contains(t, r.stderr, "targets[0].allowAdmissionWithoutMutation: must be true: opening the circuit admits objects without this webhook's mutation")
	})
}

// TestChart_markingPoliciesAreGuardManifestsMarking: the chart renders
// the marking policies from the targets, with no step before helm; for
// every configuration here they must be byte-equal, as canonical JSON, to
// what the real "guard manifests marking" renders for it, the chart's own
// labels aside. (The guard checks the installed ones at start, and its
// canary checks their digest: TestHelm_installRunsTheGuardAndUpgradeAddsATarget
// runs the guard on what the chart installed.)
func TestChart_markingPoliciesAreGuardManifestsMarking(t *testing.T) {
	header := "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\n"
	example, err := os.ReadFile(filepath.Join(root, exampleTargets, "config.yaml"))
	require.NoError(t, err)
	cases := map[string]string{
		"the example targets": string(example),
		"a validating target between, two webhooks of one configuration, names of every shape, an instance": header + `instance: canary
targets:
- {configuration: kyverno-resource-mutating-webhook-cfg, webhook: mutate.kyverno.svc-fail, allowAdmissionWithoutMutation: true}
- {kind: Validating, configuration: gatekeeper, webhook: validation.gatekeeper.sh, allowAdmissionWithoutValidation: true}
- {configuration: x.y-1, webhook: 0.9-z.example, allowAdmissionWithoutMutation: true, mode: Ignore}
- {configuration: kyverno-resource-mutating-webhook-cfg, webhook: mutate-policy.kyverno.svc, allowAdmissionWithoutMutation: true, mode: Observe}
`,
		"only validating targets": header + `targets:
- {kind: Validating, configuration: zeta, webhook: a.example.com, allowAdmissionWithoutValidation: true}
`,
	}
	for name, cfgYAML := range cases {
		t.Run(name, func(t *testing.T) {
			values := valuesFile(t, cfgYAML)
			r := runHelm(t, append([]string{"template", "webhook-guard", chartDir, "-f", values, "--show-only", "templates/marking.yaml"}, servesMarking...)...)
			if r.err != nil && strings.Contains(r.stderr, "could not find template templates/marking.yaml in chart") {
				// helm refuses --show-only of a template that renders nothing.
				r.stdout = ""
			} else {
				require.NoError(t, r.err, r.stderr)
			}
			assertMarkingIsGuardManifestsMarking(t, values, parseObjects(t, r.stdout))
		})
	}

	t.Run("marking.policies, which earlier releases took, is refused with what to do", func(t *testing.T) {
		marking := valuesFile(t, "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\n")
		r := runHelm(t, append(append([]string{"template", "webhook-guard", chartDir}, exampleValues()...), "--set-file", "marking.policies="+marking)...)
		require.Error(t, r.err)
		assert.Contains(t, r.stderr, "marking.policies is no longer read: the chart renders the marking policies of the targets itself")
	})
	t.Run("marking.enabled=false renders none", func(t *testing.T) {
		out := helmTemplate(t, "--set", "marking.enabled=false")
		assert.NotContains(t, out, "MutatingAdmissionPolicy")
	})
}

// TestChart_guardPolicyIsGuardManifestsPolicy: the chart ships the guard
// policy and binding as ordinary objects of the release, rendered from
// the targets with no step before helm; for every configuration here they
// must equal, as canonical JSON, what the real "guard manifests policy"
// renders for the release's ServiceAccount, the chart's labels aside and
// the inputs annotation compared as what it says. The guard itself only
// reads them.
func TestChart_guardPolicyIsGuardManifestsPolicy(t *testing.T) {
	header := "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\n"
	example, err := os.ReadFile(filepath.Join(root, exampleTargets, "config.yaml"))
	require.NoError(t, err)
	for name, cfgYAML := range map[string]string{
		"the example targets": string(example),
		"two webhooks of one configuration, unsorted, a validating target, an Observe target, an instance": header + `instance: canary
targets:
- {configuration: zz-mutator, webhook: b.example.com, allowAdmissionWithoutMutation: true}
- {kind: Validating, configuration: gatekeeper, webhook: validation.gatekeeper.sh, allowAdmissionWithoutValidation: true}
- {configuration: zz-mutator, webhook: a.example.com, allowAdmissionWithoutMutation: true, mode: Ignore}
- {configuration: aa-mutator, webhook: c.example.com, allowAdmissionWithoutMutation: true}
- {configuration: observed, webhook: o.example.com, mode: Observe}
`,
		"only Observe targets": header + `targets:
- {configuration: observed, webhook: o.example.com, mode: Observe}
`,
	} {
		t.Run(name, func(t *testing.T) {
			values := valuesFile(t, cfgYAML)
			const namespace = "guard-chart"
			r := runHelm(t, "template", "webhook-guard", chartDir, "-f", values, "--namespace", namespace, "--show-only", "templates/policy.yaml")
			require.NoError(t, r.err, r.stderr)
			got := parseObjects(t, r.stdout)
			bin, err := env.BuildGuard()
			require.NoError(t, err)
			out, err := exec.Command(bin, "manifests", "policy", "--config", values, "--breaker", "system:serviceaccount:"+namespace+":webhook-guard").Output()
			require.NoError(t, err, "guard manifests policy")
			want := parseObjects(t, string(out))
			require.Len(t, got, len(want))
			for i, w := range want {
				g := got[i]
				meta := g["metadata"].(object)
				labels := meta["labels"].(object)
				for _, l := range chartLabels {
					assert.Contains(t, labels, l, "%s: the chart's label", key(g))
					delete(labels, l)
				}
				wantMeta := w["metadata"].(object)
				if annotations, ok := wantMeta["annotations"].(object); ok {
					// Read by no replica of this version; the chart leaves it out.
					delete(annotations, circuit.PolicyDigestAnnotation)
					var wantInputs, gotInputs any
					require.NoError(t, json.Unmarshal([]byte(annotations[admission.PolicyInputsAnnotation].(string)), &wantInputs))
					require.NoError(t, json.Unmarshal([]byte(meta["annotations"].(object)[admission.PolicyInputsAnnotation].(string)), &gotInputs))
					assert.Equal(t, wantInputs, gotInputs, "%s: the inputs", key(w))
					delete(annotations, admission.PolicyInputsAnnotation)
					delete(meta["annotations"].(object), admission.PolicyInputsAnnotation)
				}
				wantJSON, err := json.Marshal(w)
				require.NoError(t, err)
				gotJSON, err := json.Marshal(g)
				require.NoError(t, err)
				assert.Equal(t, string(wantJSON), string(gotJSON), key(w))
			}
		})
	}
}

// TestChart_filesAreTheComponentsFiles: the alerts and the dashboard are
// copies of the kustomize component's, which the chart cannot read from
// outside its folder.
func TestChart_filesAreTheComponentsFiles(t *testing.T) {
	for _, name := range []string{"prometheusrule.yaml", "webhook-guard-dashboard.json"} {
		want, err := os.ReadFile(filepath.Join(root, "deploy", "kustomize", "components", "prometheus", name))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(root, chartDir, "files", name))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%s/files/%s differs from the kustomize component's: cp deploy/kustomize/components/prometheus/%s %s/files/", chartDir, name, name, chartDir)
	}
}

// TestChart_configYAMLIsAValuesFile: a GuardConfiguration file is a values
// file as it is, and the chart renders the same configuration from it.
func TestChart_configYAMLIsAValuesFile(t *testing.T) {
	out := helmTemplate(t, "--show-only", "templates/configmap.yaml")
	objs := parseObjects(t, out)
	require.Len(t, objs, 1)
	rendered := objs[0]["data"].(object)["config.yaml"].(string)
	example, err := os.ReadFile(filepath.Join(root, exampleTargets, "config.yaml"))
	require.NoError(t, err)
	want, err := config.Parse(example)
	require.NoError(t, err)
	got, err := config.Parse([]byte(rendered))
	require.NoError(t, err, "the guard refuses the configuration the chart renders:\n%s", rendered)
	assert.Equal(t, want, got)
}

// valuesFile writes content to a file of its own and returns its path,
// which has no comma: helm splits -f and --set-file values at commas.
func valuesFile(t *testing.T, content string) string {
	t.Helper()
	f, err := os.CreateTemp("", "webhook-guard-helm-values-*.yaml")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(f.Name()) })
	_, err = f.WriteString(content)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}

// assertMarkingIsGuardManifestsMarking: among rendered, the marking
// policies and bindings are byte-equal, as canonical JSON, to what the
// real "guard manifests marking --config cfg" renders, the chart's own
// labels aside, and there are no others.
func assertMarkingIsGuardManifestsMarking(t *testing.T, cfg string, rendered []object) {
	t.Helper()
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	out, err := exec.Command(bin, "manifests", "marking", "--config", cfg).Output()
	require.NoError(t, err, "guard manifests marking")
	want := parseObjects(t, string(out))
	got := map[string]object{}
	for _, obj := range rendered {
		if strings.HasPrefix(obj["kind"].(string), "MutatingAdmissionPolicy") {
			got[key(obj)] = obj
		}
	}
	// helm orders what it renders by kind.
	require.ElementsMatch(t, slices.Collect(maps.Keys(byKey(t, want))), slices.Collect(maps.Keys(got)))
	for _, w := range want {
		g := got[key(w)]
		labels := g["metadata"].(object)["labels"].(object)
		for _, l := range chartLabels {
			assert.Contains(t, labels, l, "%s: the chart's label", key(g))
			delete(labels, l)
		}
		wantJSON, err := json.Marshal(w)
		require.NoError(t, err)
		gotJSON, err := json.Marshal(g)
		require.NoError(t, err)
		assert.Equal(t, string(wantJSON), string(gotJSON), key(w))
	}
}

// TestGitOps_kustomizeInflatesTheChartWithNothingRenderedBefore: the
// real kustomize builds deploy/gitops (the chart inflated with
// config.yaml as its values, "kustomize build --enable-helm" as Argo CD and
// Flux can run it) with no step before it: the marking policies are
// exactly the guard's, the targets' RBAC is rendered, and no helm hook
// (the pre-delete release Job, the helm test Pod) is applied as an
// ordinary object.
func TestGitOps_kustomizeInflatesTheChartWithNothingRenderedBefore(t *testing.T) {
	dir := filepath.Join(root, "deploy", "gitops")
	r := env.Kustomize(context.Background(), "build", "--enable-helm", "--helm-command", os.Getenv("HELM"), dir)
	require.NoError(t, r.Err, "kustomize build --enable-helm %s:\n%s", dir, r.Stderr)
	objs := parseObjects(t, r.Stdout)
	assertMarkingIsGuardManifestsMarking(t, filepath.Join(dir, "config.yaml"), objs)
	kinds := map[string]int{}
	for _, obj := range objs {
		kinds[obj["kind"].(string)]++
		annotations, _ := obj["metadata"].(object)["annotations"].(object)
		assert.NotContains(t, annotations, "helm.sh/hook", "%s: a hook applied as an ordinary object", key(obj))
	}
	assert.Equal(t, 1, kinds["Deployment"])
	assert.Equal(t, 1, kinds["Namespace"], "the release's namespace, labelled restricted")
	byName := byKey(t, objs)
	assert.Contains(t, byName, "ClusterRole /webhook-guard-targets")
	assert.Contains(t, byName, "Role my-mutator/webhook-guard-path-probe", "the path probe's Role in the Service's namespace")
}
