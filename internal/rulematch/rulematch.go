package rulematch

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
)

// Request is the part of an admission request that a webhook's rules
// read.
type Request struct {
	// Operation is CREATE, UPDATE, DELETE or CONNECT.
	Operation admission.Operation
	// Resource is the group, version and resource requested.
	Resource schema.GroupVersionResource
	// Subresource is the subresource requested ("status", "scale"),
	// empty for the object itself.
	Subresource string
	// Namespaced says whether the object lives in a namespace. Rules
	// read only that, not which namespace; a Namespace object is
	// cluster-scoped whatever this says, as kube-apiserver has it.
	Namespaced bool
}

// namespacePlaceholder stands for the namespace of a namespaced request:
// kube-apiserver's matcher reads only whether there is one.
const namespacePlaceholder = "default"

// Matches reports whether rule matches req, as kube-apiserver's webhook
// dispatcher matches it: an operation, group, version and resource listed
// or "*"; "*" and a plain name ("pods") match the object but none of its
// subresources, "*/*" the object and every subresource, "pods/*" pods and
// every subresource of pods (the object too: the part after the slash is
// "*"), "pods/status" and "*/status" that subresource only; scope
// Namespaced, Cluster or "*" (unset is "*").
func Matches(rule admissionregistrationv1.RuleWithOperations, req Request) bool {
	ns := ""
	if req.Namespaced {
		ns = namespacePlaceholder
	}
	attr := admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{}, ns, "", req.Resource, req.Subresource, req.Operation, nil, false, nil)
	return (&rules.Matcher{Rule: rule, Attr: attr}).Matches()
}

// Any reports whether one of rules matches req.
func Any(rules []admissionregistrationv1.RuleWithOperations, req Request) bool {
	for _, r := range rules {
		if Matches(r, req) {
			return true
		}
	}
	return false
}
