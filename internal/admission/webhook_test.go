package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

func raw(t *testing.T, obj *admissionregistrationv1.MutatingWebhookConfiguration) runtime.RawExtension {
	t.Helper()
	if obj == nil {
		return runtime.RawExtension{}
	}
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	return runtime.RawExtension{Raw: b}
}

func request(t *testing.T, op admissionv1.Operation, old, new *admissionregistrationv1.MutatingWebhookConfiguration, user authenticationv1.UserInfo) ctrladmission.Request {
	return requestFor(t, circuit.KindMutating, op, old, new, user)
}

// requestFor is request for a configuration of kind; old and new are the
// rule's views, sent as the real objects.
func requestFor(t *testing.T, kind circuit.Kind, op admissionv1.Operation, old, new *admissionregistrationv1.MutatingWebhookConfiguration, user authenticationv1.UserInfo) ctrladmission.Request {
	name := ""
	if new != nil {
		name = new.Name
	} else if old != nil {
		name = old.Name
	}
	return ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       types.UID("uid-" + name),
		Kind:      metav1.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: kind.ObjectKind()},
		Resource:  metav1.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: kind.Resource()},
		Name:      name,
		Operation: op,
		UserInfo:  user,
		Object:    rawFor(t, kind, new),
		OldObject: rawFor(t, kind, old),
	}}
}

func rawFor(t *testing.T, kind circuit.Kind, obj *admissionregistrationv1.MutatingWebhookConfiguration) runtime.RawExtension {
	t.Helper()
	if obj == nil || kind != circuit.KindValidating {
		return raw(t, obj)
	}
	b, err := json.Marshal(admissiontest.AsValidating(obj))
	require.NoError(t, err)
	return runtime.RawExtension{Raw: b}
}

func handlerFor(opts admission.Options) *admission.Handler {
	return &admission.Handler{Options: opts}
}

func TestHandler_Handle_table(t *testing.T) {
	for i, c := range admissiontest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			name := caseName(i)
			old, new := c.Build(name)
			user := admissiontest.UserInfo(c.Actor, breaker)
			resp := handlerFor(options(c, name)).Handle(context.Background(), requestFor(t, c.ConfigKind(), admissionv1.Update, old, new, user))
			require.Equal(t, c.WantAllowed, resp.Allowed, "result %+v", resp.Result)
			want := admission.Decide(admission.Request{Kind: c.Kind, Operation: admissionv1.Update, Old: old, New: new, User: user}, options(c, name))
			if c.WantAllowed {
				return
			}
			require.NotNil(t, resp.Result)
			assert.EqualValues(t, http.StatusForbidden, resp.Result.Code)
			assert.Equal(t, metav1.StatusReasonForbidden, resp.Result.Reason)
			assert.Equal(t, want.Message, resp.Result.Message)
			for _, s := range c.WantMessage(name) {
				assert.Contains(t, resp.Result.Message, s)
			}
		})
	}
}

func TestHandler_Handle_undecodable(t *testing.T) {
	h := handlerFor(managedOpts("cfg"))
	old := admissiontest.BypassOpen("cfg")

	req := request(t, admissionv1.Update, old, old, admin())
	req.Object.Raw = []byte(`{"metadata": "not an object"`)
	resp := h.Handle(context.Background(), req)
	assert.False(t, resp.Allowed)
	assert.EqualValues(t, http.StatusBadRequest, resp.Result.Code)

	req = request(t, admissionv1.Update, old, old, admin())
	req.OldObject.Raw = []byte(`not json`)
	resp = h.Handle(context.Background(), req)
	assert.False(t, resp.Allowed)
	assert.EqualValues(t, http.StatusBadRequest, resp.Result.Code)

	req = request(t, admissionv1.Update, nil, old, admin())
	resp = h.Handle(context.Background(), req)
	assert.EqualValues(t, http.StatusBadRequest, resp.Result.Code, "UPDATE without oldObject")

	req = request(t, admissionv1.Create, nil, nil, admin())
	resp = h.Handle(context.Background(), req)
	assert.EqualValues(t, http.StatusBadRequest, resp.Result.Code, "CREATE without object")

	req = request(t, admissionv1.Create, nil, old, admin())
	req.Object.Raw = []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"cfg"}}`)
	resp = h.Handle(context.Background(), req)
	assert.EqualValues(t, http.StatusBadRequest, resp.Result.Code, "wrong kind")
}

func TestHandler_Handle_create(t *testing.T) {
	forged := admissiontest.Healthy("cfg")
	forged.Annotations = map[string]string{circuit.Annotation: admissiontest.CircuitRecord(circuit.ModeIgnore, admissiontest.OpenedAt)}
	resp := handlerFor(managedOpts("cfg")).Handle(context.Background(), request(t, admissionv1.Create, nil, forged, admissiontest.UserInfo(admissiontest.OtherSA, breaker)))
	assert.False(t, resp.Allowed)
	assert.EqualValues(t, http.StatusForbidden, resp.Result.Code)
	assert.Contains(t, resp.Result.Message, "metadata.annotations[webhook-guard.io/circuit] (added)")
}

// TestHandler_Handle_releaserCreates: the static webhook denies the
// release identity's CREATE of a managed configuration, as the Go rule
// and the policy do.
func TestHandler_Handle_releaserCreates(t *testing.T) {
	opts := managedOpts("cfg")
	created := admissiontest.Healthy("cfg")
	resp := handlerFor(opts).Handle(context.Background(), request(t, admissionv1.Create, nil, created, admissiontest.UserInfo(admissiontest.Releaser, breaker)))
	require.False(t, resp.Allowed)
	assert.EqualValues(t, http.StatusForbidden, resp.Result.Code)
	assert.Contains(t, resp.Result.Message, "webhook-guard's release identity ("+opts.Releaser()+")")
	assert.True(t, strings.HasSuffix(resp.Result.Message, "; it creates no configuration."), resp.Result.Message)

	allowed, message := compile(t, opts).decide(t, circuit.KindMutating, admissionv1.Create, nil, created, admissiontest.UserInfo(admissiontest.Releaser, breaker))
	require.False(t, allowed)
	assert.Equal(t, resp.Result.Message, message)
}

func TestHandler_Handle_deleteAllowed(t *testing.T) {
	old := admissiontest.BypassOpen("cfg")
	resp := handlerFor(managedOpts("cfg")).Handle(context.Background(), request(t, admissionv1.Delete, old, nil, admin()))
	assert.True(t, resp.Allowed)
}

func TestHandler_Handle_otherResourceAllowed(t *testing.T) {
	old := admissiontest.BypassOpen("cfg")
	req := request(t, admissionv1.Update, old, restoreFail(old), admin())
	req.Resource = metav1.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	assert.True(t, handlerFor(managedOpts("cfg")).Handle(context.Background(), req).Allowed)
}

// The same name as a mutating and as a validating configuration are two
// things: managing one does not manage the other.
func TestHandler_Handle_kindsAreDistinct(t *testing.T) {
	old := admissiontest.BypassOpen("cfg")
	mutatingOnly := managedOpts("cfg")
	validatingOnly := admission.Options{BreakerUsername: breaker, ManagedValidating: mutatingOnly.Managed}
	for name, tc := range map[string]struct {
		kind        circuit.Kind
		opts        admission.Options
		wantAllowed bool
	}{
		"a managed mutating configuration":               {circuit.KindMutating, mutatingOnly, false},
		"a validating one of the same name, not managed": {circuit.KindValidating, mutatingOnly, true},
		"a managed validating configuration":             {circuit.KindValidating, validatingOnly, false},
		"a mutating one of the same name, not managed":   {circuit.KindMutating, validatingOnly, true},
	} {
		t.Run(name, func(t *testing.T) {
			resp := handlerFor(tc.opts).Handle(context.Background(), requestFor(t, tc.kind, admissionv1.Update, old, restoreFail(old), admin()))
			require.Equal(t, tc.wantAllowed, resp.Allowed, "%+v", resp.Result)
			if !tc.wantAllowed {
				assert.Contains(t, resp.Result.Message, "kubectl annotate "+tc.kind.Singular()+" cfg ")
				assert.True(t, strings.HasPrefix(resp.Result.Message, tc.kind.Singular()+` "cfg"`), resp.Result.Message)
			}
		})
	}
}

// TestHandler_ServeHTTP runs a denial through controller-runtime's webhook
// HTTP handling, as kube-apiserver would see it.
func TestHandler_ServeHTTP(t *testing.T) {
	wh := &ctrladmission.Webhook{Handler: handlerFor(managedOpts("cfg"))}
	old := admissiontest.BypassOpen("cfg")
	req := request(t, admissionv1.Update, old, restoreFail(old), admin())
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req.AdmissionRequest,
	}
	body, err := json.Marshal(review)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	httpReq := httptest.NewRequest(http.MethodPost, admission.WebhookPath, bytes.NewReader(body))
	httpReq.Header.Set("Content-Type", "application/json")
	wh.ServeHTTP(rec, httpReq)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	var got admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.NotNil(t, got.Response)
	assert.Equal(t, review.Request.UID, got.Response.UID)
	assert.False(t, got.Response.Allowed)
	assert.EqualValues(t, http.StatusForbidden, got.Response.Result.Code)
	assert.Equal(t, metav1.StatusReasonForbidden, got.Response.Result.Reason)
	assert.Contains(t, got.Response.Result.Message, `kubectl annotate mutatingwebhookconfiguration cfg webhook-guard.io/override="<reason>"`)
}
