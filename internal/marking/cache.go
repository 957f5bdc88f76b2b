package marking

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"reflect"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cachedSpecAnnotation holds, on a marking policy or binding in the
// guard's own cache only (CacheTransform), the digest of the spec the
// transform dropped. It is never written to kube-apiserver.
const cachedSpecAnnotation = "webhook-guard.io/cached-spec-sha256"

// CacheTransform keeps a MutatingAdmissionPolicy or its binding in the
// guard's cache as its metadata and the digest of its spec, without the
// spec and the managedFields: the Keeper compares specs by digest, and
// the reconciler's watch reads only annotations. A policy's variables and
// match conditions are about 17 KB a webhook in the cache, 17 MB of the
// guard's live heap at 1,000 webhooks (hack/bench, heap profile). Other
// objects pass unchanged.
func CacheTransform(obj any) (any, error) {
	var (
		o    client.Object
		spec any
	)
	switch p := obj.(type) {
	case *admissionregistrationv1.MutatingAdmissionPolicy:
		o, spec = p, p.Spec
		defer func() { p.Spec = admissionregistrationv1.MutatingAdmissionPolicySpec{} }()
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		o, spec = p, p.Spec
		defer func() { p.Spec = admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{} }()
	default:
		return obj, nil
	}
	if _, done := o.GetAnnotations()[cachedSpecAnnotation]; done && reflect.ValueOf(spec).IsZero() {
		// Transformed already: the informer can hand the transform an
		// object it transformed before, and the digest of the empty spec
		// would replace the one kept (the Keeper then saw every policy
		// as changed by hand).
		return obj, nil
	}
	a := maps.Clone(o.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	a[cachedSpecAnnotation] = specDigest(spec)
	o.SetAnnotations(a)
	o.SetManagedFields(nil)
	return obj, nil
}

// specDigest is the SHA-256 of spec's JSON.
func specDigest(spec any) string {
	data, _ := json.Marshal(spec)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// digestOfSpec is the digest of obj's spec (a policy or a binding): the
// one CacheTransform kept, or else that of the spec it carries.
func digestOfSpec(obj client.Object, spec any) string {
	if d, ok := obj.GetAnnotations()[cachedSpecAnnotation]; ok {
		return d
	}
	return specDigest(spec)
}
