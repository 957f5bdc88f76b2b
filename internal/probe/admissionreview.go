package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/request"
)

// probeObjectName is metadata.name of the synthetic object sent in
// AdmissionReview probes.
const probeObjectName = "webhook-guard-probe"

// probeNamespace is the namespace of a namespaced probe object: one that
// exists in every cluster, so a webhook that looks it up finds it.
const probeNamespace = "default"

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

// AdmissionReviewProbeable returns why wh cannot be probed with an
// AdmissionReview, or nil: its sideEffects must allow a dry run, and it must
// accept admission.k8s.io/v1 reviews.
func AdmissionReviewProbeable(wh admissionregistrationv1.MutatingWebhook) error {
	if !DryRunSafe(wh.SideEffects) {
		return fmt.Errorf("webhook %q cannot be probed with an AdmissionReview: sideEffects %s is neither None nor NoneOnDryRun, so a dry-run probe is not safe",
			wh.Name, sideEffectsString(wh.SideEffects))
	}
	if !acceptsV1(wh.AdmissionReviewVersions) {
		return fmt.Errorf("webhook %q cannot be probed with an AdmissionReview: admissionReviewVersions %v lack %q",
			wh.Name, wh.AdmissionReviewVersions, admissionReviewVersion)
	}
	return nil
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

// targetFor picks the resource from the webhook's first rule (the first
// non-"*" entry of each list, falling back to "" / "v1" / "configmaps")
// and asks mapper for its kind and scope, as the apiserver's discovery
// knows them.
func targetFor(wh admissionregistrationv1.MutatingWebhook, mapper meta.RESTMapper, cache *sync.Map) (probeTarget, error) {
	gvr := schema.GroupVersionResource{Group: "", Version: "v1", Resource: "configmaps"}
	if len(wh.Rules) > 0 {
		rule := wh.Rules[0].Rule
		if g, ok := firstConcrete(rule.APIGroups); ok {
			gvr.Group = g
		}
		if v, ok := firstConcrete(rule.APIVersions); ok {
			gvr.Version = v
		}
		resources := make([]string, 0, len(rule.Resources))
		for _, r := range rule.Resources {
			// "pods/status" -> "pods"; subresources are not probed.
			resources = append(resources, strings.SplitN(r, "/", 2)[0])
		}
		if r, ok := firstConcrete(resources); ok {
			gvr.Resource = r
		}
	}
	if mapper == nil {
		return probeTarget{}, errors.New("the prober has no RESTMapper to find the probed resource's kind")
	}
	if cache != nil {
		if c, ok := cache.Load(gvr); ok && time.Since(c.(cachedTarget).at) < kindCacheTTL {
			return c.(cachedTarget).target, nil
		}
	}
	gvk, err := mapper.KindFor(gvr)
	if err != nil {
		return probeTarget{}, fmt.Errorf("finding the kind of %s: %w", gvr, err)
	}
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return probeTarget{}, fmt.Errorf("finding the scope of %s: %w", gvk, err)
	}
	t := probeTarget{gvr: metav1.GroupVersionResource(gvr), kind: gvk.Kind}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		t.namespace = probeNamespace
	}
	if cache != nil {
		cache.Store(gvr, cachedTarget{target: t, at: time.Now()})
	}
	return t, nil
}

// kindCacheTTL is how long the kind and scope of a probed resource are
// remembered; a CRD that changes scope is seen within it.
const kindCacheTTL = 5 * time.Minute

type cachedTarget struct {
	target probeTarget
	at     time.Time
}

func firstConcrete(values []string) (string, bool) {
	for _, v := range values {
		if v != "*" {
			return v, true
		}
	}
	return "", false
}

// newAdmissionReview builds the dry-run CREATE review sent to the webhook.
func newAdmissionReview(t probeTarget, username string) (*admissionv1.AdmissionReview, error) {
	apiVersion := t.gvr.Version
	if t.gvr.Group != "" {
		apiVersion = t.gvr.Group + "/" + t.gvr.Version
	}
	object, err := json.Marshal(probeObject(apiVersion, t))
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

// verifyAdmissionResponse checks a 200 body the way kube-apiserver does:
// request.VerifyAdmissionResponse (which refuses a patch from a validating
// webhook), then, for a mutating one, the checks the mutating dispatcher
// makes before it applies a patch (JSONPatch only, and a patch it can
// decode). allowed:false is a valid answer.
func verifyAdmissionResponse(uid types.UID, mutating bool, body []byte) error {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return badResponsef("body is not a JSON AdmissionReview: %v", err)
	}
	r, err := request.VerifyAdmissionResponse(uid, mutating, &review)
	if err != nil {
		return badResponsef("%v", err)
	}
	if r.PatchType != "" && r.PatchType != admissionv1.PatchTypeJSONPatch {
		return badResponsef("unsupported response.patchType %q", r.PatchType)
	}
	if len(r.Patch) > 0 {
		if _, err := jsonpatch.DecodePatch(r.Patch); err != nil {
			return badResponsef("response.patch is not a JSON patch: %v", err)
		}
	}
	return nil
}
