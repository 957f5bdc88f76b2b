// Package rulematch says whether a webhook's rules match an admission
// request, with kube-apiserver's own matcher (k8s.io/apiserver's
// predicates/rules.Matcher): operations, API groups, versions, resources
// with their subresources ("*", "*/*", "pods/*", "*/status") and scope
// ("Namespaced", "Cluster", "*"), exactly as the webhook dispatcher reads
// them. The guard's Go code that matches rules (the probe's choice of a
// resource, the requests that intercept the guard, the objects "guard
// unmutated" lists) matches them here, so it cannot drift from
// kube-apiserver. The marking policy mirrors the same rules in CEL
// (internal/marking) and is tested against the apiserver itself.
//
// It does not evaluate a webhook's other criteria (namespaceSelector,
// objectSelector, matchConditions, matchPolicy's equivalent resources):
// callers that need them apply them. It must not import any package of
// this repository: every layer may import it.
package rulematch
