package probe

import (
	"fmt"
	"slices"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/generic"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/request"
	"k8s.io/apiserver/pkg/authentication/user"
)

// probeObjectName is metadata.name of the synthetic object sent in
// AdmissionReview probes.
const probeObjectName = "webhook-guard-probe"

// probeNamespace is the namespace of a namespaced probe object: one that
// exists in every cluster, so a webhook that looks it up finds it.
const probeNamespace = "default"

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

// AdmissionReviewProbeable returns why wh cannot be probed with an
// AdmissionReview, or nil: its sideEffects must allow a dry run, it must
// accept an AdmissionReview version kube-apiserver sends (v1 or v1beta1),
// and one of its rules must match a CREATE of a resource (RulesProbeable).
func AdmissionReviewProbeable(wh admissionregistrationv1.MutatingWebhook) error {
	if !DryRunSafe(wh.SideEffects) {
		return fmt.Errorf("webhook %q cannot be probed with an AdmissionReview: sideEffects %s is neither None nor NoneOnDryRun, so a dry-run probe is not safe",
			wh.Name, sideEffectsString(wh.SideEffects))
	}
	if !slices.ContainsFunc(wh.AdmissionReviewVersions, func(v string) bool {
		return v == admissionv1.SchemeGroupVersion.Version || v == admissionv1beta1.SchemeGroupVersion.Version
	}) {
		return fmt.Errorf("webhook %q cannot be probed with an AdmissionReview: admissionReviewVersions %v name neither v1 nor v1beta1, so kube-apiserver cannot call it either",
			wh.Name, wh.AdmissionReviewVersions)
	}
	if err := RulesProbeable(wh.Rules); err != nil {
		return fmt.Errorf("webhook %q cannot be probed with an AdmissionReview: %w", wh.Name, err)
	}
	return nil
}

// newAdmissionRequest builds the dry-run CREATE review kube-apiserver
// would send wh for an object of target, by kube-apiserver's own code
// (request.CreateAdmissionObjects): the version is the first of the
// webhook's admissionReviewVersions that kube-apiserver knows, and response
// is the empty review its answer is decoded into.
func newAdmissionRequest(wh *admissionregistrationv1.MutatingWebhook, t probeTarget, username string) (uid types.UID, req, response runtime.Object, err error) {
	apiVersion := t.gvr.Version
	if t.gvr.Group != "" {
		apiVersion = t.gvr.Group + "/" + t.gvr.Version
	}
	gvk := schema.GroupVersionKind{Group: t.gvr.Group, Version: t.gvr.Version, Kind: t.kind}
	gvr := schema.GroupVersionResource{Group: t.gvr.Group, Version: t.gvr.Version, Resource: t.gvr.Resource}
	obj := &unstructured.Unstructured{Object: probeObject(apiVersion, t)}
	options := &metav1.CreateOptions{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"},
		DryRun:   []string{metav1.DryRunAll},
	}
	attrs := admission.NewAttributesRecord(obj, nil, gvk, t.namespace, probeObjectName, gvr, "", admission.Create, options, true, &user.DefaultInfo{Name: username})
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedObject: admission.NewLazyObject(obj), VersionedKind: gvk}
	invocation := &generic.WebhookInvocation{Webhook: webhook.NewMutatingWebhookAccessor(probeObjectName, "", wh), Resource: gvr, Kind: gvk}
	return request.CreateAdmissionObjects(versioned, invocation)
}

// probeImage is the container image of probe Pods and Deployments: the
// one every cluster already runs.
const probeImage = "registry.k8s.io/pause:3.10"

// probeObject is the object a probe pretends to create: a valid one of the
// common kinds, so that a webhook that reads spec does not fail on a
// skeleton and open a healthy circuit, and metadata alone for the others.
func probeObject(apiVersion string, t probeTarget) map[string]any {
	labels := map[string]any{"app.kubernetes.io/name": probeObjectName, "app.kubernetes.io/managed-by": "webhook-guard"}
	metadata := map[string]any{"name": probeObjectName, "labels": labels}
	if t.namespace != "" {
		metadata["namespace"] = t.namespace
	}
	obj := map[string]any{"apiVersion": apiVersion, "kind": t.kind, "metadata": metadata}
	podSpec := map[string]any{
		"containers": []any{map[string]any{
			"name": "probe", "image": probeImage,
			"resources": map[string]any{"requests": map[string]any{"cpu": "1m", "memory": "1Mi"}},
		}},
	}
	switch t.gvr.Group + "/" + t.gvr.Resource {
	case "/pods":
		obj["spec"] = podSpec
	case "/configmaps":
		obj["data"] = map[string]any{"probe": "webhook-guard"}
	case "/secrets":
		obj["type"] = "Opaque"
		obj["data"] = map[string]any{"probe": "d2ViaG9vay1ndWFyZA=="}
	case "apps/deployments", "apps/replicasets", "apps/statefulsets", "apps/daemonsets":
		spec := map[string]any{
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": podSpec},
		}
		if t.gvr.Resource != "daemonsets" {
			spec["replicas"] = 1
		}
		obj["spec"] = spec
	}
	return obj
}

// verifyAdmissionResponse checks a decoded answer the way kube-apiserver's
// dispatchers do before they use it: request.VerifyAdmissionResponse
// (which refuses a patch from a validating webhook and a patch without its
// type), then, for a mutating webhook, a patch kube-apiserver can decode
// and a patch type it supports. Each of these is a calling error there,
// subject to the failurePolicy. allowed:false is a valid answer. A patch
// that decodes but does not apply to the object is not checked: kube-apiserver
// rejects that request with an internal error whatever the failurePolicy,
// so it says nothing about the webhook's health.
func verifyAdmissionResponse(uid types.UID, mutating bool, review runtime.Object) error {
	r, err := request.VerifyAdmissionResponse(uid, mutating, review)
	if err != nil {
		return badResponsef("%v", err)
	}
	if !r.Allowed || len(r.Patch) == 0 {
		return nil
	}
	patch, err := jsonpatch.DecodePatch(r.Patch)
	if err != nil {
		return badResponsef("undecodable patch: %v", err)
	}
	if len(patch) > 0 && r.PatchType != admissionv1.PatchTypeJSONPatch {
		return badResponsef("unsupported patch type %q", r.PatchType)
	}
	return nil
}
