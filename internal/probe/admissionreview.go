package probe

import (
	"encoding/json"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// probeObjectName is metadata.name (and, for namespaced objects,
// metadata.namespace) of the synthetic object sent in AdmissionReview probes.
const probeObjectName = "webhook-guard-probe"

// admissionReviewVersion is the only AdmissionReview version this package sends.
const admissionReviewVersion = "v1"

// DryRunSafe reports whether a webhook with these sideEffects may receive a
// dry-run AdmissionReview probe: only None and NoneOnDryRun are safe.
// kube-apiserver itself refuses to send dry-run requests to other webhooks.
func DryRunSafe(sideEffects *admissionregistrationv1.SideEffectClass) bool {
	if sideEffects == nil {
		return false
	}
	switch *sideEffects {
	case admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.SideEffectClassNoneOnDryRun:
		return true
	default:
		return false
	}
}

// acceptsV1 reports whether the webhook accepts admission.k8s.io/v1 reviews.
// An empty list (impossible for a validated v1 object) is treated as yes.
func acceptsV1(versions []string) bool {
	if len(versions) == 0 {
		return true
	}
	for _, v := range versions {
		if v == admissionReviewVersion {
			return true
		}
	}
	return false
}

// probeTarget is the group/version/resource and object identity a probe
// pretends to CREATE.
type probeTarget struct {
	gvr       metav1.GroupVersionResource
	kind      string
	namespace string // empty for cluster-scoped objects
}

// targetFor picks the resource from the webhook's first rule: the first
// non-"*" entry of each list, falling back to "" / "v1" / "configmaps".
func targetFor(wh admissionregistrationv1.MutatingWebhook) probeTarget {
	t := probeTarget{
		gvr:       metav1.GroupVersionResource{Group: "", Version: "v1", Resource: "configmaps"},
		namespace: probeObjectName,
	}
	var scope *admissionregistrationv1.ScopeType
	if len(wh.Rules) > 0 {
		rule := wh.Rules[0].Rule
		scope = rule.Scope
		if g, ok := firstConcrete(rule.APIGroups); ok {
			t.gvr.Group = g
		}
		if v, ok := firstConcrete(rule.APIVersions); ok {
			t.gvr.Version = v
		}
		resources := make([]string, 0, len(rule.Resources))
		for _, r := range rule.Resources {
			// "pods/status" -> "pods"; subresources are not probed.
			resources = append(resources, strings.SplitN(r, "/", 2)[0])
		}
		if r, ok := firstConcrete(resources); ok {
			t.gvr.Resource = r
		}
	}
	t.kind = kindFor(t.gvr.Resource)
	if (scope != nil && *scope == admissionregistrationv1.ClusterScope) || clusterScoped[t.gvr.Resource] {
		t.namespace = ""
	}
	return t
}

func firstConcrete(values []string) (string, bool) {
	for _, v := range values {
		if v != "*" {
			return v, true
		}
	}
	return "", false
}

// knownKinds spells the kinds of common resources properly; others are derived.
var knownKinds = map[string]string{
	"configmaps":             "ConfigMap",
	"cronjobs":               "CronJob",
	"daemonsets":             "DaemonSet",
	"deployments":            "Deployment",
	"endpoints":              "Endpoints",
	"ingresses":              "Ingress",
	"networkpolicies":        "NetworkPolicy",
	"persistentvolumeclaims": "PersistentVolumeClaim",
	"persistentvolumes":      "PersistentVolume",
	"replicasets":            "ReplicaSet",
	"serviceaccounts":        "ServiceAccount",
	"statefulsets":           "StatefulSet",
}

// clusterScoped lists common cluster-scoped resources, so the probe object
// gets no namespace even when the rule's scope is "*".
var clusterScoped = map[string]bool{
	"namespaces":                true,
	"nodes":                     true,
	"persistentvolumes":         true,
	"clusterroles":              true,
	"clusterrolebindings":       true,
	"customresourcedefinitions": true,
	"storageclasses":            true,
}

// kindFor derives a plausible kind from a plural resource name.
func kindFor(resource string) string {
	if k, ok := knownKinds[resource]; ok {
		return k
	}
	singular := resource
	switch {
	case strings.HasSuffix(resource, "ies"):
		singular = strings.TrimSuffix(resource, "ies") + "y"
	case strings.HasSuffix(resource, "sses"), strings.HasSuffix(resource, "xes"),
		strings.HasSuffix(resource, "ches"), strings.HasSuffix(resource, "shes"):
		singular = strings.TrimSuffix(resource, "es")
	case strings.HasSuffix(resource, "s"):
		singular = strings.TrimSuffix(resource, "s")
	}
	if singular == "" {
		return "Object"
	}
	return strings.ToUpper(singular[:1]) + singular[1:]
}

// newAdmissionReview builds the dry-run CREATE review sent to the webhook.
func newAdmissionReview(wh admissionregistrationv1.MutatingWebhook, username string) (*admissionv1.AdmissionReview, error) {
	t := targetFor(wh)
	apiVersion := t.gvr.Version
	if t.gvr.Group != "" {
		apiVersion = t.gvr.Group + "/" + t.gvr.Version
	}
	meta := map[string]string{"name": probeObjectName}
	if t.namespace != "" {
		meta["namespace"] = t.namespace
	}
	object, err := json.Marshal(map[string]any{
		"apiVersion": apiVersion,
		"kind":       t.kind,
		"metadata":   meta,
	})
	if err != nil {
		return nil, err
	}
	options, err := json.Marshal(&metav1.CreateOptions{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"},
		DryRun:   []string{metav1.DryRunAll},
	})
	if err != nil {
		return nil, err
	}
	gvk := metav1.GroupVersionKind{Group: t.gvr.Group, Version: t.gvr.Version, Kind: t.kind}
	gvr := t.gvr
	dryRun := true
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:             uuid.NewUUID(),
			Kind:            gvk,
			Resource:        gvr,
			RequestKind:     &gvk,
			RequestResource: &gvr,
			Name:            probeObjectName,
			Namespace:       t.namespace,
			Operation:       admissionv1.Create,
			UserInfo:        authenticationv1.UserInfo{Username: username},
			Object:          runtime.RawExtension{Raw: object},
			DryRun:          &dryRun,
			Options:         runtime.RawExtension{Raw: options},
		},
	}, nil
}

// verifyAdmissionResponse checks a 200 body the way kube-apiserver does for a
// mutating webhook (request.VerifyAdmissionResponse plus the JSONPatch-only
// rule of the mutating dispatcher). allowed:false is a valid answer.
func verifyAdmissionResponse(uid types.UID, body []byte) error {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return badResponsef("body is not a JSON AdmissionReview: %v", err)
	}
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" {
		return badResponsef("expected apiVersion %q kind %q, got apiVersion %q kind %q",
			admissionv1.SchemeGroupVersion.String(), "AdmissionReview", review.APIVersion, review.Kind)
	}
	r := review.Response
	if r == nil {
		return badResponsef("response is absent")
	}
	if r.UID != uid {
		return badResponsef("expected response.uid=%q, got %q", uid, r.UID)
	}
	switch {
	case len(r.Patch) > 0 && r.PatchType == nil:
		return badResponsef("response.patch without response.patchType")
	case len(r.Patch) == 0 && r.PatchType != nil:
		return badResponsef("response.patchType without response.patch")
	case r.PatchType != nil && *r.PatchType != admissionv1.PatchTypeJSONPatch:
		return badResponsef("unsupported response.patchType %q", *r.PatchType)
	}
	if len(r.Patch) > 0 {
		// kube-apiserver decodes the patch before applying it; one it cannot
		// decode fails the call.
		var ops []map[string]json.RawMessage
		if err := json.Unmarshal(r.Patch, &ops); err != nil {
			return badResponsef("response.patch is not a JSON patch: %v", err)
		}
		for i, op := range ops {
			if _, ok := op["op"]; !ok {
				return badResponsef("response.patch operation %d has no op", i)
			}
		}
	}
	return nil
}
