package unmutated

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/restmapper"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli/clitest"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// served is what discovery says a small cluster serves: core, apps,
// rbac, and autoscaling in two versions.
var served = []*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: []string{"create", "list", "get", "update"}},
		{Name: "pods/status", Kind: "Pod", Namespaced: true, Verbs: []string{"get", "update"}},
		{Name: "pods/ephemeralcontainers", Kind: "Pod", Namespaced: true, Verbs: []string{"get", "update"}},
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"create", "list", "get"}},
		{Name: "namespaces", Kind: "Namespace", Verbs: []string{"create", "list", "get"}},
		{Name: "nodes", Kind: "Node", Verbs: []string{"create", "list", "get"}},
		{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: []string{"create"}},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: []string{"create", "list", "get"}},
		{Name: "deployments/scale", Kind: "Scale", Group: "autoscaling", Version: "v1", Namespaced: true, Verbs: []string{"get", "update"}},
		{Name: "deployments/status", Kind: "Deployment", Namespaced: true, Verbs: []string{"get", "update"}},
		{Name: "replicasets", Kind: "ReplicaSet", Namespaced: true, Verbs: []string{"create", "list", "get"}},
	}},
	{GroupVersion: "rbac.authorization.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "roles", Kind: "Role", Namespaced: true, Verbs: []string{"create", "list", "get"}},
		{Name: "clusterroles", Kind: "ClusterRole", Verbs: []string{"create", "list", "get"}},
	}},
	{GroupVersion: "autoscaling/v2", APIResources: []metav1.APIResource{
		{Name: "horizontalpodautoscalers", Kind: "HorizontalPodAutoscaler", Namespaced: true, Verbs: []string{"create", "list", "get"}},
	}},
	{GroupVersion: "autoscaling/v1", APIResources: []metav1.APIResource{
		{Name: "horizontalpodautoscalers", Kind: "HorizontalPodAutoscaler", Namespaced: true, Verbs: []string{"create", "list", "get"}},
	}},
}

// servedGroups are the groups of served, preferred version first.
var servedGroups = []*metav1.APIGroup{
	{Name: "", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "v1", Version: "v1"}}, PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "v1", Version: "v1"}},
	{Name: "apps", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "apps/v1", Version: "v1"}}, PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "apps/v1", Version: "v1"}},
	{Name: "rbac.authorization.k8s.io", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "rbac.authorization.k8s.io/v1", Version: "v1"}},
		PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "rbac.authorization.k8s.io/v1", Version: "v1"}},
	{Name: "autoscaling", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "autoscaling/v2", Version: "v2"}, {GroupVersion: "autoscaling/v1", Version: "v1"}},
		PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "autoscaling/v2", Version: "v2"}},
}

func rule(groups, versions, resources []string, scope *admissionregistrationv1.ScopeType, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	if len(ops) == 0 {
		ops = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
	}
	return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources, Scope: scope}}
}

var all = []string{"*"}

func kinds(names ...string) []string { return names }

func TestMarkableKinds(t *testing.T) {
	for name, tc := range map[string]struct {
		rules []admissionregistrationv1.RuleWithOperations
		want  []string // group/kind, in discovery's order
	}{
		"*/* lists every listable resource, each kind once": {[]admissionregistrationv1.RuleWithOperations{rule(all, all, kinds("*/*"), nil)},
			kinds("/Pod", "/ConfigMap", "/Namespace", "/Node", "apps/Deployment", "apps/ReplicaSet", "rbac.authorization.k8s.io/Role", "rbac.authorization.k8s.io/ClusterRole", "autoscaling/HorizontalPodAutoscaler")},
		"* lists every listable resource too": {[]admissionregistrationv1.RuleWithOperations{rule(all, all, all, nil)},
			kinds("/Pod", "/ConfigMap", "/Namespace", "/Node", "apps/Deployment", "apps/ReplicaSet", "rbac.authorization.k8s.io/Role", "rbac.authorization.k8s.io/ClusterRole", "autoscaling/HorizontalPodAutoscaler")},
		"pods lists pods":                           {[]admissionregistrationv1.RuleWithOperations{rule(kinds(""), kinds("v1"), kinds("pods"), nil)}, kinds("/Pod")},
		"pods/* lists pods":                         {[]admissionregistrationv1.RuleWithOperations{rule(kinds(""), kinds("v1"), kinds("pods/*"), nil)}, kinds("/Pod")},
		"a subresource only lists its object":       {[]admissionregistrationv1.RuleWithOperations{rule(kinds(""), kinds("v1"), kinds("pods/ephemeralcontainers"), nil, admissionregistrationv1.Update)}, kinds("/Pod")},
		"*/status lists what has a status":          {[]admissionregistrationv1.RuleWithOperations{rule(all, all, kinds("*/status"), nil, admissionregistrationv1.Update)}, kinds("/Pod", "apps/Deployment")},
		"a subresource nobody serves lists nothing": {[]admissionregistrationv1.RuleWithOperations{rule(all, all, kinds("*/exec"), nil)}, nil},
		"an explicit group and version":             {[]admissionregistrationv1.RuleWithOperations{rule(kinds("apps"), kinds("v1"), kinds("deployments"), nil)}, kinds("apps/Deployment")},
		"a version not served lists nothing":        {[]admissionregistrationv1.RuleWithOperations{rule(kinds("apps"), kinds("v1beta1"), kinds("deployments"), nil)}, nil},
		"a version served besides the preferred":    {[]admissionregistrationv1.RuleWithOperations{rule(kinds("autoscaling"), kinds("v1"), all, nil)}, kinds("autoscaling/HorizontalPodAutoscaler")},
		"scope Cluster lists cluster-scoped kinds": {[]admissionregistrationv1.RuleWithOperations{rule(kinds("rbac.authorization.k8s.io"), all, all, ptr.To(admissionregistrationv1.ClusterScope))},
			kinds("rbac.authorization.k8s.io/ClusterRole")},
		"scope Namespaced lists namespaced kinds": {[]admissionregistrationv1.RuleWithOperations{rule(kinds("rbac.authorization.k8s.io"), all, all, ptr.To(admissionregistrationv1.NamespacedScope))},
			kinds("rbac.authorization.k8s.io/Role")},
		"scope * lists both": {[]admissionregistrationv1.RuleWithOperations{rule(kinds("rbac.authorization.k8s.io"), all, all, ptr.To(admissionregistrationv1.AllScopes))},
			kinds("rbac.authorization.k8s.io/Role", "rbac.authorization.k8s.io/ClusterRole")},
		"Namespaced in the core group leaves out Namespaces and Nodes": {[]admissionregistrationv1.RuleWithOperations{rule(kinds(""), all, all, ptr.To(admissionregistrationv1.NamespacedScope))},
			kinds("/Pod", "/ConfigMap")},
		"Cluster in the core group is Namespaces and Nodes": {[]admissionregistrationv1.RuleWithOperations{rule(kinds(""), all, all, ptr.To(admissionregistrationv1.ClusterScope))},
			kinds("/Namespace", "/Node")},
		"DELETE only is never marked":         {[]admissionregistrationv1.RuleWithOperations{rule(all, all, kinds("*/*"), nil, admissionregistrationv1.Delete)}, nil},
		"UPDATE is marked":                    {[]admissionregistrationv1.RuleWithOperations{rule(kinds(""), all, kinds("configmaps"), nil, admissionregistrationv1.Update)}, kinds("/ConfigMap")},
		"a resource that cannot be listed":    {[]admissionregistrationv1.RuleWithOperations{rule(kinds(""), all, kinds("bindings"), nil)}, nil},
		"no rules, nothing":                   {nil, nil},
		"two rules, each kind once, in order": {[]admissionregistrationv1.RuleWithOperations{rule(kinds("apps"), all, all, nil), rule(kinds("", "apps"), all, kinds("pods", "replicasets"), nil)}, kinds("/Pod", "apps/Deployment", "apps/ReplicaSet")},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, gk := range markableKinds(tc.rules, served) {
				got = append(got, gk.Group+"/"+gk.Kind)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestMarkedRules(t *testing.T) {
	wh := admissionregistrationv1.MutatingWebhook{Rules: []admissionregistrationv1.RuleWithOperations{rule(kinds("apps"), kinds("v1beta1"), kinds("deployments"), nil)}}
	for name, tc := range map[string]struct {
		policy *admissionregistrationv1.MatchPolicyType
		want   []string
	}{
		"unset is Equivalent: any version": {nil, all},
		"Equivalent: any version":          {ptr.To(admissionregistrationv1.Equivalent), all},
		"Exact: the versions listed":       {ptr.To(admissionregistrationv1.Exact), kinds("v1beta1")},
	} {
		t.Run(name, func(t *testing.T) {
			wh.MatchPolicy = tc.policy
			got := markedRules(wh)
			require.Len(t, got, 1)
			assert.Equal(t, tc.want, got[0].APIVersions)
			assert.Equal(t, kinds("v1beta1"), wh.Rules[0].APIVersions, "the webhook's rules are left as they are")
		})
	}
}

// fakeDiscovery serves lists, and fails with err.
type fakeDiscovery struct {
	lists []*metav1.APIResourceList
	err   error
}

func (d fakeDiscovery) ServerGroupsAndResourcesWithContext(context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return servedGroups, d.lists, d.err
}

// object is the metadata of a marked object of kind (apiVersion/Kind) or
// an unmarked one (id empty).
func object(apiVersion, kind, namespace, name, id string, owners ...metav1.OwnerReference) runtime.Object {
	o := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + kind + "-" + namespace + "-" + name), OwnerReferences: owners}}
	if id != "" {
		o.Labels = map[string]string{circuit.UnmutatedLabel: id}
		o.Annotations = map[string]string{circuit.UnmutatedAnnotation: "note " + id}
	}
	return o
}

func controlledBy(apiVersion, kind, name string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, Controller: ptr.To(true)}
}

// webhookConfiguration is a configuration whose webhook "hook" has rules.
func webhookConfiguration(name string, rules ...admissionregistrationv1.RuleWithOperations) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "hook", Rules: rules}}}
}

// The finder looks where the targets' rules let their marking policies
// leave a mark, and finds there whatever carries one of the targets'
// marks (a mark of one target in a kind another's rules reach is found
// too: rules can change after the marking): a */* webhook's marks in
// every kind, a pods/* webhook's on pods, a Cluster webhook's on
// cluster-scoped objects only. Each object's owner is the top of its
// controller chain.
func TestFinder_find(t *testing.T) {
	everything, podsAndSubs, clusterRBAC := marking.ID("everything", "hook"), marking.ID("pods", "hook"), marking.ID("cluster-rbac", "hook")
	target := func(name string) config.Target {
		return config.Target{Kind: circuit.KindMutating, Configuration: name, Webhook: "hook"}
	}
	reader := clitest.FakeReader(
		webhookConfiguration("everything", rule(all, all, kinds("*/*"), nil)),
		webhookConfiguration("pods", rule(kinds(""), kinds("v1"), kinds("pods/*"), nil)),
		webhookConfiguration("cluster-rbac", rule(kinds("rbac.authorization.k8s.io"), all, all, ptr.To(admissionregistrationv1.ClusterScope), admissionregistrationv1.OperationAll)),
	)
	objects := []runtime.Object{
		object("v1", "ConfigMap", "team", "by-everything", everything),
		object("rbac.authorization.k8s.io/v1", "ClusterRole", "", "by-everything", everything),
		object("apps/v1", "Deployment", "team", "web", everything),
		object("apps/v1", "ReplicaSet", "team", "web-1", everything, controlledBy("apps/v1", "Deployment", "web")),
		object("v1", "Pod", "team", "web-1-a", podsAndSubs, controlledBy("apps/v1", "ReplicaSet", "web-1")),
		object("v1", "Pod", "team", "web-1-b", podsAndSubs, controlledBy("apps/v1", "ReplicaSet", "web-1")),
		object("v1", "Pod", "team", "orphan", podsAndSubs, controlledBy("apps/v1", "ReplicaSet", "deleted")),
		object("v1", "ConfigMap", "team", "by-pods", podsAndSubs),
		object("rbac.authorization.k8s.io/v1", "ClusterRole", "", "by-cluster-rbac", clusterRBAC),
		object("rbac.authorization.k8s.io/v1", "Role", "team", "by-cluster-rbac", clusterRBAC),
		object("v1", "ConfigMap", "team", "unmarked", ""),
		object("v1", "ConfigMap", "team", "by-someone-else", marking.ID("other", "hook")),
	}
	scheme := runtime.NewScheme()
	require.NoError(t, metav1.AddMetaToScheme(scheme))
	mc := metadatafake.NewSimpleMetadataClient(scheme, objects...)
	mapper := meta.ToRESTMapperWithContext(restmapper.NewDiscoveryRESTMapper(groupResources()))
	type row struct{ gvk, namespace, name, id, owner string }
	for name, tc := range map[string]struct {
		targets []config.Target
		want    []row
	}{
		"pods/* finds marked pods, Cluster marked ClusterRoles, not Roles; a gone configuration nothing": {
			[]config.Target{target("pods"), target("cluster-rbac"), target("gone")},
			[]row{
				{"/v1, Kind=Pod", "team", "orphan", podsAndSubs, "ReplicaSet team/deleted"},
				{"/v1, Kind=Pod", "team", "web-1-a", podsAndSubs, "Deployment team/web"},
				{"/v1, Kind=Pod", "team", "web-1-b", podsAndSubs, "Deployment team/web"},
				{"rbac.authorization.k8s.io/v1, Kind=ClusterRole", "", "by-cluster-rbac", clusterRBAC, "ClusterRole by-cluster-rbac"},
			},
		},
		"*/* finds every marked object": {
			[]config.Target{target("everything"), target("pods"), target("cluster-rbac")},
			[]row{
				{"/v1, Kind=ConfigMap", "team", "by-everything", everything, "ConfigMap team/by-everything"},
				{"/v1, Kind=ConfigMap", "team", "by-pods", podsAndSubs, "ConfigMap team/by-pods"},
				{"/v1, Kind=Pod", "team", "orphan", podsAndSubs, "ReplicaSet team/deleted"},
				{"/v1, Kind=Pod", "team", "web-1-a", podsAndSubs, "Deployment team/web"},
				{"/v1, Kind=Pod", "team", "web-1-b", podsAndSubs, "Deployment team/web"},
				{"apps/v1, Kind=Deployment", "team", "web", everything, "Deployment team/web"},
				{"apps/v1, Kind=ReplicaSet", "team", "web-1", everything, "Deployment team/web"},
				{"rbac.authorization.k8s.io/v1, Kind=ClusterRole", "", "by-cluster-rbac", clusterRBAC, "ClusterRole by-cluster-rbac"},
				{"rbac.authorization.k8s.io/v1, Kind=ClusterRole", "", "by-everything", everything, "ClusterRole by-everything"},
				{"rbac.authorization.k8s.io/v1, Kind=Role", "team", "by-cluster-rbac", clusterRBAC, "Role team/by-cluster-rbac"},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			mc.ClearActions()
			f := &finder{c: reader, mc: mc, dc: fakeDiscovery{lists: served}, mapper: mapper}
			res, err := f.find(context.Background(), &config.Configuration{Targets: tc.targets})
			require.NoError(t, err)
			assert.Empty(t, res.unavailable)
			gets := map[string]int{}
			for _, a := range mc.Actions() {
				if g, ok := a.(clienttesting.GetAction); ok {
					gets[g.GetResource().Resource+"/"+g.GetName()]++
				}
			}
			assert.Equal(t, map[string]int{"replicasets/web-1": 1, "deployments/web": 1, "replicasets/deleted": 1}, gets, "each owner is read once")
			var got []row
			for _, o := range res.objects {
				got = append(got, row{o.gvk.String(), o.namespace, o.name, o.id, o.ownerKind + " " + objectName(o.ownerNamespace, o.ownerName)})
				assert.Equal(t, "note "+o.id, o.note)
			}
			assert.Equal(t, tc.want, got)
		})
	}

	cfg := &config.Configuration{Targets: []config.Target{target("pods"), target("cluster-rbac")}}
	t.Run("what cannot be read is named, and the rest is still found", func(t *testing.T) {
		f := &finder{c: reader, mc: mc, mapper: mapper, dc: fakeDiscovery{lists: served, err: &discovery.ErrGroupDiscoveryFailed{
			Groups: map[schema.GroupVersion]error{{Group: "metrics.k8s.io", Version: "v1beta1"}: errors.New("the server is currently unable to handle the request")}}}}
		res, err := f.find(context.Background(), cfg)
		require.NoError(t, err)
		assert.Equal(t, []string{"group metrics.k8s.io/v1beta1: the server is currently unable to handle the request"}, res.unavailable)
		assert.Len(t, res.objects, 4)
	})
	t.Run("nothing discovered at all is an error", func(t *testing.T) {
		f := &finder{c: reader, mc: mc, mapper: mapper, dc: fakeDiscovery{err: errors.New("connection refused")}}
		_, err := f.find(context.Background(), cfg)
		assert.ErrorContains(t, err, "discovering the served resources: connection refused")
	})
	t.Run("without a mutating target there is nothing to look for", func(t *testing.T) {
		f := &finder{c: reader, mc: mc, mapper: mapper, dc: fakeDiscovery{lists: served}}
		_, err := f.find(context.Background(), &config.Configuration{Targets: []config.Target{{Kind: circuit.KindValidating, Configuration: "v", Webhook: "hook"}}})
		assert.ErrorIs(t, err, errNoMutatingTarget)
	})
}

// groupResources is served as restmapper reads it.
func groupResources() []*restmapper.APIGroupResources {
	var out []*restmapper.APIGroupResources
	for _, g := range servedGroups {
		gr := &restmapper.APIGroupResources{Group: *g, VersionedResources: map[string][]metav1.APIResource{}}
		for _, l := range served {
			gv, _ := schema.ParseGroupVersion(l.GroupVersion)
			if gv.Group == g.Name {
				gr.VersionedResources[gv.Version] = l.APIResources
			}
		}
		out = append(out, gr)
	}
	return out
}
