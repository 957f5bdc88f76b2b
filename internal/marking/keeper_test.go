package marking

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// A re-opening soon after a close may find the cache behind the
// apiserver: the cache says the policy is gone while the apiserver still
// has it (or has it again). Ensure reads it from the apiserver and goes
// on, instead of failing with "already exists".
func TestKeeper_Ensure_aCacheBehindTheApiserverIsNoError(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	opened := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	wh := admissionregistrationv1.MutatingWebhook{Name: "inject.example.com", Rules: []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}}
	policy, binding := Render("injector", wh, opened, "breaker")
	apiserver := fake.NewClientBuilder().WithScheme(scheme).WithObjects(policy, binding).Build()

	tests := map[string]struct {
		reader    client.Reader
		wantError string
	}{
		"with an APIReader, the apiserver's copy is used":                 {reader: apiserver},
		"without one, the cache is read again and the error is explained": {wantError: "reading MutatingAdmissionPolicy"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			creates := 0
			// The cache: every Get says not found; writes reach the apiserver.
			cache := interceptor.NewClient(apiserver.(client.WithWatch), interceptor.Funcs{
				Get: func(ctx context.Context, _ client.WithWatch, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
					return apierrors.NewNotFound(schema.GroupResource{Resource: "mutatingadmissionpolicies"}, key.Name)
				},
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					creates++
					return c.Create(ctx, obj, opts...)
				},
			})
			k := &Keeper{Client: cache, APIReader: tc.reader, Breaker: "breaker"}
			_, err := k.Ensure(context.Background(), "injector", Open{Webhook: wh, OpenedAt: opened})
			if tc.wantError != "" {
				require.ErrorContains(t, err, tc.wantError)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 2, creates, "both creates were tried, and both found the object")
		})
	}
}
