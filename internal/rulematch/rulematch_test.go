package rulematch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"
)

func TestMatches(t *testing.T) {
	var (
		pods         = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		configmaps   = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
		namespaces   = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
		deployments  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
		clusterroles = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
		create       = func(res schema.GroupVersionResource, sub string, namespaced bool) Request {
			return Request{Operation: admission.Create, Resource: res, Subresource: sub, Namespaced: namespaced}
		}
	)
	rule := func(groups, versions, resources []string, scope *admissionregistrationv1.ScopeType, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
		if len(ops) == 0 {
			ops = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
		}
		return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: groups, APIVersions: versions, Resources: resources, Scope: scope}}
	}
	all := []string{"*"}
	anyResource := func(resources ...string) admissionregistrationv1.RuleWithOperations {
		return rule(all, all, resources, nil)
	}
	scoped := func(scope admissionregistrationv1.ScopeType) admissionregistrationv1.RuleWithOperations {
		return rule(all, all, all, ptr.To(scope))
	}
	for name, tc := range map[string]struct {
		rule admissionregistrationv1.RuleWithOperations
		req  Request
		want bool
	}{
		"*/* matches an object":                   {anyResource("*/*"), create(pods, "", true), true},
		"*/* matches every subresource":           {anyResource("*/*"), create(deployments, "scale", true), true},
		"*/* matches a cluster-scoped object":     {anyResource("*/*"), create(clusterroles, "", false), true},
		"* matches every object":                  {anyResource("*"), create(configmaps, "", true), true},
		"* matches no subresource":                {anyResource("*"), create(pods, "status", true), false},
		"pods/* matches the subresources of pods": {anyResource("pods/*"), create(pods, "ephemeralcontainers", true), true},
		// Not "subresources only", as the API reference reads: kube-apiserver's
		// matcher (and its own test, "r & subresources") matches pods too.
		"pods/* matches pods themselves as well":         {anyResource("pods/*"), create(pods, "", true), true},
		"pods/* does not match another's subresources":   {anyResource("pods/*"), create(deployments, "status", true), false},
		"*/status matches only status":                   {anyResource("*/status"), create(deployments, "scale", true), false},
		"a rule for a subresource misses the object":     {anyResource("pods/status"), create(pods, "", true), false},
		"a rule for a subresource matches it":            {anyResource("pods/status"), create(pods, "status", true), true},
		"pods matches pods":                              {anyResource("pods"), create(pods, "", true), true},
		"pods matches no subresource of pods":            {anyResource("pods"), create(pods, "status", true), false},
		"pods does not match configmaps":                 {anyResource("pods"), create(configmaps, "", true), false},
		"an explicit group and version match":            {rule([]string{"apps"}, []string{"v1"}, []string{"deployments"}, nil), create(deployments, "", true), true},
		"another version does not":                       {rule([]string{"apps"}, []string{"v1beta1"}, []string{"deployments"}, nil), create(deployments, "", true), false},
		"another group does not":                         {rule([]string{"extensions"}, all, []string{"deployments"}, nil), create(deployments, "", true), false},
		"the core group is the empty string":             {rule([]string{""}, []string{"v1"}, []string{"*"}, nil), create(configmaps, "", true), true},
		"Namespaced matches a namespaced object":         {scoped(admissionregistrationv1.NamespacedScope), create(pods, "", true), true},
		"Namespaced does not match a cluster object":     {scoped(admissionregistrationv1.NamespacedScope), create(clusterroles, "", false), false},
		"Namespaced never matches a Namespace":           {scoped(admissionregistrationv1.NamespacedScope), create(namespaces, "", true), false},
		"Cluster matches a cluster-scoped object":        {scoped(admissionregistrationv1.ClusterScope), create(clusterroles, "", false), true},
		"Cluster does not match a namespaced object":     {scoped(admissionregistrationv1.ClusterScope), create(pods, "", true), false},
		"Cluster matches a Namespace":                    {scoped(admissionregistrationv1.ClusterScope), create(namespaces, "", true), true},
		"scope * matches a namespaced object":            {scoped(admissionregistrationv1.AllScopes), create(pods, "", true), true},
		"scope * matches a cluster-scoped object":        {scoped(admissionregistrationv1.AllScopes), create(clusterroles, "", false), true},
		"another operation does not match":               {rule(all, all, all, nil, admissionregistrationv1.Delete), create(pods, "", true), false},
		"operation * matches every operation":            {rule(all, all, all, nil, admissionregistrationv1.OperationAll), Request{Operation: admission.Connect, Resource: pods, Namespaced: true}, true},
		"UPDATE matches an update, not a create":         {rule(all, all, all, nil, admissionregistrationv1.Update), Request{Operation: admission.Update, Resource: pods, Namespaced: true}, true},
		"a rule with UPDATE only does not match CREATE":  {rule(all, all, all, nil, admissionregistrationv1.Update), create(pods, "", true), false},
		"an unset scope matches a cluster-scoped object": {anyResource("*"), create(clusterroles, "", false), true},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, Matches(tc.rule, tc.req))
		})
	}
}

func TestAny(t *testing.T) {
	pods := Request{Operation: admission.Create, Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespaced: true}
	rule := func(resource string) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}}}
	}
	assert.False(t, Any(nil, pods), "no rules match nothing")
	assert.False(t, Any([]admissionregistrationv1.RuleWithOperations{rule("configmaps"), rule("pods/status")}, pods))
	assert.True(t, Any([]admissionregistrationv1.RuleWithOperations{rule("configmaps"), rule("pods")}, pods), "the second rule matches")
}
