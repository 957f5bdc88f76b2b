package probe

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/discovery"

	"github.com/webhook-guard/webhook-guard/internal/rulematch"
)

var (
	opCreate = admissionregistrationv1.Create
	opUpdate = admissionregistrationv1.Update
	opDelete = admissionregistrationv1.Delete
	opAll    = admissionregistrationv1.OperationAll
)

// rule is one rule of a webhook.
func rule(ops []admissionregistrationv1.OperationType, groups, versions, resources []string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule:       admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources},
	}
}

func ops(o ...admissionregistrationv1.OperationType) []admissionregistrationv1.OperationType {
	return o
}

func strs(s ...string) []string { return s }

func TestRulesProbeable(t *testing.T) {
	tests := map[string]struct {
		rules   []admissionregistrationv1.RuleWithOperations
		wantErr []string // substrings of the error; nil means no error
	}{
		"no rules": {
			wantErr: strs("no rules"),
		},
		"only a subresource": {
			rules:   []admissionregistrationv1.RuleWithOperations{rule(ops(opCreate), strs(""), strs("v1"), strs("pods/status"))},
			wantErr: strs("rules[0]", "pods/status", "CREATE"),
		},
		"only one subresource of every resource": {
			rules:   []admissionregistrationv1.RuleWithOperations{rule(ops(opAll), strs("*"), strs("*"), strs("*/status"))},
			wantErr: strs("rules[0]", "*/status"),
		},
		"only DELETE": {
			rules:   []admissionregistrationv1.RuleWithOperations{rule(ops(opDelete), strs(""), strs("v1"), strs("pods"))},
			wantErr: strs("rules[0]", "DELETE", "pods"),
		},
		"CREATE of a subresource and DELETE of a resource: neither is a CREATE of a resource": {
			rules: []admissionregistrationv1.RuleWithOperations{
				rule(ops(opCreate), strs(""), strs("v1"), strs("pods/eviction")),
				rule(ops(opDelete, opUpdate), strs(""), strs("v1"), strs("pods")),
			},
			wantErr: strs("rules[0]", "pods/eviction", "rules[1]", "DELETE"),
		},
		"every resource":                 {rules: []admissionregistrationv1.RuleWithOperations{rule(ops(opCreate), strs("*"), strs("*"), strs("*"))}},
		"every resource and subresource": {rules: []admissionregistrationv1.RuleWithOperations{rule(ops(opCreate), strs("*"), strs("*"), strs("*/*"))}},
		// kube-apiserver's rules.Matcher: "pods/*" matches pods themselves
		// too, its "*" matching the empty subresource.
		"a resource and every subresource of it": {rules: []admissionregistrationv1.RuleWithOperations{rule(ops(opAll), strs(""), strs("v1"), strs("pods/*"))}},
		"a plain resource name":                  {rules: []admissionregistrationv1.RuleWithOperations{rule(ops(opCreate), strs("apps"), strs("v1"), strs("deployments"))}},
		"a resource next to its subresource":     {rules: []admissionregistrationv1.RuleWithOperations{rule(ops(opCreate), strs(""), strs("v1"), strs("pods/status", "pods"))}},
		"every operation":                        {rules: []admissionregistrationv1.RuleWithOperations{rule(ops(opAll), strs(""), strs("v1"), strs("pods"))}},
		"UPDATE and CREATE":                      {rules: []admissionregistrationv1.RuleWithOperations{rule(ops(opUpdate, opCreate), strs(""), strs("v1"), strs("pods"))}},
		"a later rule that is probeable": {rules: []admissionregistrationv1.RuleWithOperations{
			rule(ops(opDelete), strs(""), strs("v1"), strs("pods")),
			rule(ops(opCreate), strs(""), strs("v1"), strs("configmaps")),
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := RulesProbeable(tc.rules)
			if tc.wantErr == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, s := range tc.wantErr {
				assert.ErrorContains(t, err, s)
			}
			// The same reason makes the webhook unprobeable, by its name.
			wh := urlWebhook("https://hook.example.com/mutate", nil)
			wh.Rules = tc.rules
			err = AdmissionReviewProbeable(wh)
			assert.ErrorContains(t, err, `"hook.example.com"`)
			assert.ErrorContains(t, err, tc.wantErr[0])
		})
	}
}

func TestTargetFor_choosesAServedResourceTheRulesMatch(t *testing.T) {
	target := func(group, version, resource, kind string, namespaced bool) probeTarget {
		t := probeTarget{gvr: metav1.GroupVersionResource{Group: group, Version: version, Resource: resource}, kind: kind}
		if namespaced {
			t.namespace = probeNamespace
		}
		return t
	}
	configmaps := target("", "v1", "configmaps", "ConfigMap", true)
	rules := func(r ...admissionregistrationv1.RuleWithOperations) []admissionregistrationv1.RuleWithOperations {
		return r
	}
	scoped := func(r admissionregistrationv1.RuleWithOperations, s admissionregistrationv1.ScopeType) admissionregistrationv1.RuleWithOperations {
		r.Scope = &s
		return r
	}
	tests := map[string]struct {
		rules   []admissionregistrationv1.RuleWithOperations
		want    probeTarget
		wantErr []string
	}{
		"every group and resource is core configmaps": {
			rules: rules(rule(ops(opCreate), strs("*"), strs("*"), strs("*"))),
			want:  configmaps,
		},
		"every resource and subresource is core configmaps": {
			rules: rules(rule(ops(opAll), strs("*"), strs("*"), strs("*/*"))),
			want:  configmaps,
		},
		"cert-manager's rule is its alphabetically first creatable resource": {
			rules: rules(rule(ops(opCreate, opUpdate), strs("cert-manager.io", "acme.cert-manager.io"), strs("v1"), strs("*/*"))),
			want:  target("cert-manager.io", "v1", "certificaterequests", "CertificateRequest", true),
		},
		"groups are tried in the order listed": {
			rules: rules(rule(ops(opCreate), strs("acme.cert-manager.io", "cert-manager.io"), strs("v1"), strs("*"))),
			want:  target("acme.cert-manager.io", "v1", "challenges", "Challenge", true),
		},
		"scope Cluster is a cluster-scoped resource": {
			rules: rules(scoped(rule(ops(opCreate), strs("*"), strs("*"), strs("*")), admissionregistrationv1.ClusterScope)),
			want:  target("", "v1", "namespaces", "Namespace", false),
		},
		"scope Cluster in cert-manager's groups is clusterissuers": {
			rules: rules(scoped(rule(ops(opCreate), strs("cert-manager.io"), strs("v1"), strs("*")), admissionregistrationv1.ClusterScope)),
			want:  target("cert-manager.io", "v1", "clusterissuers", "ClusterIssuer", false),
		},
		"scope Namespaced skips a cluster-scoped resource": {
			rules: rules(scoped(rule(ops(opCreate), strs(""), strs("v1"), strs("namespaces", "pods")), admissionregistrationv1.NamespacedScope)),
			want:  target("", "v1", "pods", "Pod", true),
		},
		"scope * matches either": {
			rules: rules(scoped(rule(ops(opCreate), strs(""), strs("v1"), strs("namespaces")), admissionregistrationv1.AllScopes)),
			want:  target("", "v1", "namespaces", "Namespace", false),
		},
		"apiVersions * is the preferred version": {
			rules: rules(rule(ops(opCreate), strs("autoscaling"), strs("*"), strs("horizontalpodautoscalers"))),
			want:  target("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true),
		},
		"versions are tried in the order listed": {
			rules: rules(rule(ops(opCreate), strs("autoscaling"), strs("v1", "v2"), strs("horizontalpodautoscalers"))),
			want:  target("autoscaling", "v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true),
		},
		"a version that is not served is skipped": {
			rules: rules(rule(ops(opCreate), strs("autoscaling"), strs("v2beta2", "v2"), strs("horizontalpodautoscalers"))),
			want:  target("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true),
		},
		"a resource in any group is found in its group, at the preferred version": {
			rules: rules(rule(ops(opCreate), strs("*"), strs("*"), strs("horizontalpodautoscalers"))),
			want:  target("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true),
		},
		"a multi-word resource gets its real kind": {
			rules: rules(rule(ops(opCreate), strs("batch"), strs("v1"), strs("cronjobs"))),
			want:  target("batch", "v1", "cronjobs", "CronJob", true),
		},
		"a resource listed next to its subresource is the resource": {
			rules: rules(rule(ops(opCreate), strs("apps"), strs("v1"), strs("deployments/scale", "deployments"))),
			want:  target("apps", "v1", "deployments", "Deployment", true),
		},
		"resources are tried in the order listed": {
			rules: rules(rule(ops(opCreate), strs(""), strs("v1"), strs("pods", "configmaps"))),
			want:  target("", "v1", "pods", "Pod", true),
		},
		"a first rule that matches nothing served gives way to the second": {
			rules: rules(
				rule(ops(opCreate), strs("example.com"), strs("v1"), strs("widgets")),
				rule(ops(opCreate), strs("batch"), strs("v1"), strs("cronjobs")),
			),
			want: target("batch", "v1", "cronjobs", "CronJob", true),
		},
		"a first rule without CREATE gives way to the second": {
			rules: rules(
				rule(ops(opDelete), strs(""), strs("v1"), strs("pods")),
				rule(ops(opCreate), strs("apps"), strs("v1"), strs("deployments")),
			),
			want: target("apps", "v1", "deployments", "Deployment", true),
		},
		"a resource that is not served is an error naming it": {
			rules:   rules(rule(ops(opCreate), strs("example.com"), strs("v1"), strs("widgets"))),
			wantErr: strs("widgets", "example.com"),
		},
		"a served resource that cannot be created is an error": {
			rules:   rules(rule(ops(opCreate), strs(""), strs("v1"), strs("componentstatuses"))),
			wantErr: strs("componentstatuses"),
		},
		"a served resource at a version that is not served is an error": {
			rules:   rules(rule(ops(opCreate), strs("apps"), strs("v1beta1"), strs("deployments"))),
			wantErr: strs("v1beta1"),
		},
		"a resource outside the groups listed is an error": {
			rules:   rules(rule(ops(opCreate), strs("apps"), strs("v1"), strs("configmaps"))),
			wantErr: strs("configmaps"),
		},
		"scope Cluster with only namespaced resources is an error": {
			rules:   rules(scoped(rule(ops(opCreate), strs("apps"), strs("*"), strs("*")), admissionregistrationv1.ClusterScope)),
			wantErr: strs("apps"),
		},
		"rules only of subresources are an error before discovery": {
			rules:   rules(rule(ops(opCreate), strs(""), strs("v1"), strs("pods/status"))),
			wantErr: strs("pods/status"),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wh := admissionregistrationv1.MutatingWebhook{Name: "hook.example.com", Rules: tc.rules}
			got, err := targetFor(wh, testDiscovery(), &catalog{})
			if tc.wantErr != nil {
				require.Error(t, err)
				for _, s := range tc.wantErr {
					assert.ErrorContains(t, err, s)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestTargetFor_withoutDiscoveryIsAnError(t *testing.T) {
	wh := urlWebhook("https://hook.example.com/mutate", nil)
	_, err := targetFor(wh, nil, &catalog{})
	assert.ErrorContains(t, err, "discovery")
}

// age makes the catalog's last read happen d earlier.
func (c *catalog) age(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fetched = c.fetched.Add(-d)
}

// Discovery is read once per catalogTTL, however many probes ask; a rule
// that finds nothing reads it again at most once per catalogRetry, and so
// finds a CRD installed since.
func TestCatalog_cachesDiscovery(t *testing.T) {
	d := testDiscovery()
	var c catalog
	deployments := urlWebhook("https://hook.example.com/mutate", nil)
	widgets := deployments
	widgets.Rules = []admissionregistrationv1.RuleWithOperations{rule(ops(opCreate), strs("example.com"), strs("v1"), strs("widgets"))}

	for range 5 {
		got, err := targetFor(deployments, d, &c)
		require.NoError(t, err)
		assert.Equal(t, "deployments", got.gvr.Resource)
	}
	assert.EqualValues(t, 1, d.calls.Load(), "five probes, one read")

	for range 3 {
		_, err := targetFor(widgets, d, &c)
		require.Error(t, err)
	}
	assert.EqualValues(t, 1, d.calls.Load(), "a miss within catalogRetry of the last read reads nothing")

	// The CRD is installed.
	d.groups = append(d.groups, &metav1.APIGroup{
		Name:             "example.com",
		Versions:         []metav1.GroupVersionForDiscovery{{GroupVersion: "example.com/v1", Version: "v1"}},
		PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "example.com/v1", Version: "v1"},
	})
	d.lists = append(d.lists, &metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: crud},
	}})
	c.age(catalogRetry)
	for range 3 {
		got, err := targetFor(deployments, d, &c)
		require.NoError(t, err)
		assert.Equal(t, "deployments", got.gvr.Resource)
	}
	assert.EqualValues(t, 1, d.calls.Load(), "a hit does not read again before catalogTTL")
	// A miss past catalogRetry reads discovery once, beside the probes:
	// the probe that missed goes on with what was known (Unknown), and the
	// ones after the read find the CRD.
	require.Eventually(t, func() bool {
		_, err := targetFor(widgets, d, &c)
		return err == nil
	}, 5*time.Second, time.Millisecond, "the CRD was never found")
	for range 3 {
		got, err := targetFor(widgets, d, &c)
		require.NoError(t, err)
		assert.Equal(t, probeTarget{gvr: metav1.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, kind: "Widget", namespace: probeNamespace}, got)
	}
	assert.EqualValues(t, 2, d.calls.Load(), "a miss past catalogRetry reads once, and finds the CRD")

	c.age(catalogTTL)
	for range 3 {
		_, err := targetFor(deployments, d, &c)
		require.NoError(t, err, "a stale catalog is used while it is read again")
	}
	require.Eventually(t, func() bool { return d.calls.Load() == 3 }, 5*time.Second, time.Millisecond, "past catalogTTL, one read")
}

// A refresh of a known catalog never holds a probe: while discovery
// hangs (the apiserver's seats are full), probes go on with what is known.
func TestCatalog_refreshDoesNotHoldProbes(t *testing.T) {
	d := testDiscovery()
	var c catalog
	deployments := urlWebhook("https://hook.example.com/mutate", nil)
	_, err := targetFor(deployments, d, &c)
	require.NoError(t, err)
	d.block = make(chan struct{})
	defer close(d.block)
	c.age(catalogTTL)
	done := make(chan error, 1)
	go func() {
		_, err := targetFor(deployments, d, &c)
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("a probe waited for discovery's refresh")
	}
}

// A failed read keeps what was known. With nothing known, the probe is
// Unknown, and discovery is read again after catalogRetry, not only after
// catalogTTL: one failed read at start-up must not blind every
// AdmissionReview probe for catalogTTL.
func TestCatalog_discoveryErrors(t *testing.T) {
	wh := urlWebhook("https://hook.example.com/mutate", nil)

	t.Run("nothing known", func(t *testing.T) {
		d := testDiscovery()
		d.errOnce = errors.New("the server is currently unable to handle the request")
		var c catalog
		for range 2 {
			_, err := targetFor(wh, d, &c)
			assert.ErrorContains(t, err, "unable to handle the request")
		}
		assert.EqualValues(t, 1, d.calls.Load(), "not read again within catalogRetry")
		c.age(catalogRetry)
		got, err := targetFor(wh, d, &c)
		require.NoError(t, err)
		assert.Equal(t, "deployments", got.gvr.Resource)
		assert.EqualValues(t, 2, d.calls.Load())
	})
	t.Run("something known", func(t *testing.T) {
		d := testDiscovery()
		var c catalog
		_, err := targetFor(wh, d, &c)
		require.NoError(t, err)
		d.errOnce = errors.New("connection refused")
		c.age(catalogTTL)
		got, err := targetFor(wh, d, &c)
		require.NoError(t, err, "what was known is used while it is read again")
		assert.Equal(t, "deployments", got.gvr.Resource)
		require.Eventually(t, func() bool { return d.calls.Load() == 2 }, 5*time.Second, time.Millisecond)
		got, err = targetFor(wh, d, &c)
		require.NoError(t, err, "what was known is kept after the failed read")
		assert.Equal(t, "deployments", got.gvr.Resource)
	})
	t.Run("some groups failed", func(t *testing.T) {
		// A discovery client returns what it could read with an
		// ErrGroupDiscoveryFailed for the rest (an aggregated API down).
		d := testDiscovery()
		partial := &partialDiscovery{groups: d.groups, lists: d.lists, err: &discovery.ErrGroupDiscoveryFailed{
			Groups: map[schema.GroupVersion]error{{Group: "metrics.k8s.io", Version: "v1beta1"}: errors.New("the server is currently unable to handle the request")},
		}}
		got, err := targetFor(wh, partial, &catalog{})
		require.NoError(t, err)
		assert.Equal(t, "deployments", got.gvr.Resource)
	})
}

// partialDiscovery answers with resources and an error, as a discovery
// client does when some groups failed.
type partialDiscovery struct {
	groups []*metav1.APIGroup
	lists  []*metav1.APIResourceList
	err    error
}

func (p *partialDiscovery) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return p.groups, p.lists, p.err
}

// mainResources agrees with kube-apiserver's own matcher (rulematch) on
// which resource entries match a CREATE of the resource itself.
func TestMainResources_agreesWithKubeAPIServer(t *testing.T) {
	for _, entry := range []string{"pods", "*", "*/*", "pods/*", "pods/status", "*/status", "deployments/scale", "configmaps"} {
		r := rule(ops(opCreate), strs("*"), strs("*"), strs(entry))
		apiserver := false
		for _, resource := range []string{"pods", "configmaps", "deployments"} {
			if rulematch.Matches(r, rulematch.Request{Operation: admission.Create, Resource: schema.GroupVersionResource{Version: "v1", Resource: resource}, Namespaced: true}) {
				apiserver = true
			}
		}
		assert.Equal(t, apiserver, len(mainResources([]string{entry})) > 0, "%q", entry)
	}
}
