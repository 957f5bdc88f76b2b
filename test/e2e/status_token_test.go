package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The status reader and the Role of whoever runs "guard status", as
// deploy/kustomize/base/rbac/status_role.yaml names them.
const (
	statusReaderSA   = "webhook-guard-status-reader"
	statusUserRole   = "webhook-guard-status-user"
	statusReaderRole = "webhook-guard-status-reader"
)

// The shipped Role webhook-guard-status-user lets its holder create tokens
// of the status reader and of no other ServiceAccount. RBAC cannot limit a
// TokenRequest's audience or expiry: the holder gets a token of the reader
// for any audience (the apiserver's own included, which authenticates to
// kube-apiserver as the reader) and any expiry the apiserver allows, up
// to 2^32 seconds on an apiserver without
// --service-account-max-token-expiration, as this one is. What such a token
// can do is bounded by the reader's own RBAC: get /status, and nothing
// the apiserver serves (docs/security.md, "The status endpoint").
func TestStatusToken_theUserRoleMintsReaderTokensOfAnyAudienceAndExpiry(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)

	// The shipped reader, its ClusterRole (under a name of this test's) and
	// the user Role, in this test's namespace.
	var reader corev1.ServiceAccount
	var userRole rbacv1.Role
	var readerRole rbacv1.ClusterRole
	for _, doc := range installDocs(t, installBuild(t, ctx, "default")) {
		meta, _ := doc["metadata"].(map[string]any)
		var into any
		switch doc["kind"].(string) + "/" + meta["name"].(string) {
		case "ServiceAccount/" + statusReaderSA:
			into = &reader
		case "Role/" + statusUserRole:
			into = &userRole
		case "ClusterRole/" + statusReaderRole:
			into = &readerRole
		default:
			continue
		}
		b, err := yaml.Marshal(doc)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(b, into))
	}
	require.NotEmpty(t, reader.Name, "the default overlay ships no ServiceAccount %s", statusReaderSA)
	require.NotEmpty(t, userRole.Rules, "the default overlay ships no Role %s", statusUserRole)
	require.NotEmpty(t, readerRole.Rules, "the default overlay ships no ClusterRole %s", statusReaderRole)
	reader.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: reader.Name}
	userRole.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: userRole.Name}
	readerRole.ObjectMeta = metav1.ObjectMeta{Name: statusReaderRole + "-" + ns}
	jane := "jane-" + ns
	for _, obj := range []client.Object{
		&reader, &userRole, &readerRole,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: readerRole.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: readerRole.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: statusReaderSA}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: jane},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: statusUserRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: jane}},
		},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-guard"}},
	} {
		require.NoError(t, env.Client.Create(ctx, obj))
		if obj.GetNamespace() == "" {
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
		}
	}
	// The reader's namesake in another namespace: the Role is namespaced.
	elsewhere := testNamespace(t)
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: elsewhere, Name: statusReaderSA}}))

	janeConfig := rest.CopyConfig(env.Config)
	janeConfig.Impersonate = rest.ImpersonationConfig{UserName: jane}
	janeClient, err := kubernetes.NewForConfig(janeConfig)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, spec := range []authorizationv1.SubjectAccessReviewSpec{
			{User: jane, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: ns, Name: statusReaderSA}},
			{User: "system:serviceaccount:" + ns + ":" + statusReaderSA, Groups: []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:" + ns},
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/status"}},
		} {
			sar, err := env.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil || !sar.Status.Allowed {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "RBAC for %s and the reader never took effect", jane)

	mint := func(namespace, name string, seconds int64, audiences ...string) (*authenticationv1.TokenRequest, error) {
		return janeClient.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To(seconds)},
		}, metav1.CreateOptions{})
	}
	const tenYears = int64(10 * 365 * 24 * 3600)

	t.Run("a token of the reader for any audience, for ten years", func(t *testing.T) {
		asked := time.Now()
		tr, err := mint(ns, statusReaderSA, tenYears, "https://vault.example.com")
		require.NoError(t, err)
		assert.Equal(t, tenYears, *tr.Spec.ExpirationSeconds, "not capped: this apiserver has no --service-account-max-token-expiration")
		assert.WithinDuration(t, asked.Add(time.Duration(tenYears)*time.Second), tr.Status.ExpirationTimestamp.Time, time.Minute)
		claims := jwtClaims(t, tr.Status.Token)
		assert.Equal(t, []any{"https://vault.example.com"}, claims["aud"])
		assert.Equal(t, "system:serviceaccount:"+ns+":"+statusReaderSA, claims["sub"])
		assert.True(t, apierrors.IsUnauthorized(selfReview(ctx, tr.Status.Token, nil)), "kube-apiserver refuses a foreign audience")
	})

	t.Run("the ceiling is the TokenRequest API's own, 2^32 seconds, and the floor 10 minutes", func(t *testing.T) {
		_, err := mint(ns, statusReaderSA, 1<<32+1, "https://vault.example.com")
		assert.True(t, apierrors.IsInvalid(err), "%v", err)
		_, err = mint(ns, statusReaderSA, 599, "https://vault.example.com")
		assert.True(t, apierrors.IsInvalid(err), "%v", err)
	})

	t.Run("a token for the apiserver's own audience authenticates as the reader, who may do nothing but get /status", func(t *testing.T) {
		tr, err := mint(ns, statusReaderSA, tenYears)
		require.NoError(t, err)
		var review authenticationv1.SelfSubjectReview
		require.NoError(t, selfReview(ctx, tr.Status.Token, &review))
		assert.Equal(t, "system:serviceaccount:"+ns+":"+statusReaderSA, review.Status.UserInfo.Username)

		rc := rest.AnonymousClientConfig(env.Config)
		rc.BearerToken = tr.Status.Token
		asReader, err := kubernetes.NewForConfig(rc)
		require.NoError(t, err)
		for what, tc := range map[string]struct {
			attrs    authorizationv1.SelfSubjectAccessReviewSpec
			expected bool
		}{
			"get /status":                        {authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/status"}}, true},
			"get /metrics":                       {authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/metrics"}}, false},
			"a token of itself, to renew itself": {authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: ns, Name: statusReaderSA}}, false},
			"get pods in its namespace":          {authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: ns}}, false},
			"list secrets anywhere":              {authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}}, false},
			"list webhook configurations":        {authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}}, false},
		} {
			ssar, err := asReader.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: tc.attrs}, metav1.CreateOptions{})
			require.NoError(t, err, what)
			assert.Equal(t, tc.expected, ssar.Status.Allowed, "the reader may %s: %s", what, ssar.Status.Reason)
		}
	})

	t.Run("no token of any other ServiceAccount", func(t *testing.T) {
		for _, sa := range []struct{ namespace, name string }{{ns, "webhook-guard"}, {ns, "default"}, {elsewhere, statusReaderSA}} {
			_, err := mint(sa.namespace, sa.name, 600, "webhook-guard.io/status")
			assert.True(t, apierrors.IsForbidden(err), "a token of %s/%s: %v", sa.namespace, sa.name, err)
		}
	})
}

// jwtClaims decodes a token's claims, unverified: the apiserver issued it.
func jwtClaims(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	claims := map[string]any{}
	require.NoError(t, json.Unmarshal(payload, &claims))
	return claims
}

// selfReview asks kube-apiserver who token is, into review when not nil.
func selfReview(ctx context.Context, token string, review *authenticationv1.SelfSubjectReview) error {
	rc := rest.AnonymousClientConfig(env.Config)
	rc.BearerToken = token
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	got, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err == nil && review != nil {
		*review = *got
	}
	return err
}
