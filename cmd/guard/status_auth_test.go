package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// What reaches the metrics filter: on /status, the token of
// statusTokenHeader as the bearer token and statusAudience required;
// elsewhere, the request as it came.
func TestWithStatusCredentials_preparesOnlyStatus(t *testing.T) {
	cases := map[string]struct {
		path                string
		header, auth        string
		wantAuth            string
		wantAudiences       authenticator.Audiences
		wantHeaderForwarded bool
	}{
		"the token header on /status becomes the bearer token, of the status audience": {
			path: statusPath, header: "reader-token", wantAuth: "Bearer reader-token", wantAudiences: authenticator.Audiences{statusAudience}},
		"the token header replaces a bearer token on /status": {
			path: statusPath, header: "reader-token", auth: "Bearer other", wantAuth: "Bearer reader-token", wantAudiences: authenticator.Audiences{statusAudience}},
		"a bearer token on /status must be of the status audience too": {
			path: statusPath, auth: "Bearer own", wantAuth: "Bearer own", wantAudiences: authenticator.Audiences{statusAudience}},
		"no credentials on /status stay none": {
			path: statusPath, wantAudiences: authenticator.Audiences{statusAudience}},
		"/metrics is untouched: the header is no credential there": {
			path: "/metrics", header: "reader-token", auth: "Bearer scraper", wantAuth: "Bearer scraper", wantHeaderForwarded: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got *http.Request
			provider := withStatusCredentials(func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
				return func(_ logr.Logger, next http.Handler) (http.Handler, error) {
					return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { got = req; next.ServeHTTP(w, req) }), nil
				}, nil
			})
			filter, err := provider(nil, nil)
			require.NoError(t, err)
			h, err := filter(logr.Discard(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			require.NoError(t, err)
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.header != "" {
				req.Header.Set(statusTokenHeader, tc.header)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			require.NotNil(t, got)
			assert.Equal(t, tc.wantAuth, got.Header.Get("Authorization"))
			assert.Equal(t, tc.wantHeaderForwarded, got.Header.Get(statusTokenHeader) != "")
			auds, _ := authenticator.AudiencesFrom(got.Context())
			assert.Equal(t, tc.wantAudiences, auds)
		})
	}
}

// controller-runtime's filter, wrapped, against a stand-in apiserver that
// answers TokenReviews and SubjectAccessReviews: no token is 401 and
// reaches no review, the TokenReview asks for the status audience, a
// denied SubjectAccessReview for get /status is 403, and only an allowed
// one reaches the rows. (test/e2e/partition asks the real apiserver.)
func TestWithStatusCredentials_authenticatesAndAuthorizesWithTheAPIServer(t *testing.T) {
	var (
		mu        sync.Mutex
		audiences [][]string
		sars      []authorizationv1.SubjectAccessReviewSpec
	)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(req.URL.Path, "/tokenreviews"):
			var tr authenticationv1.TokenReview
			if !assert.NoError(t, json.NewDecoder(req.Body).Decode(&tr)) {
				return
			}
			audiences = append(audiences, tr.Spec.Audiences)
			if user, ok := strings.CutPrefix(tr.Spec.Token, "token-of-"); ok {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}, Audiences: tr.Spec.Audiences}
			}
			_ = json.NewEncoder(w).Encode(tr)
		case strings.HasSuffix(req.URL.Path, "/subjectaccessreviews"):
			var sar authorizationv1.SubjectAccessReview
			if !assert.NoError(t, json.NewDecoder(req.Body).Decode(&sar)) {
				return
			}
			sars = append(sars, sar.Spec)
			sar.Status.Allowed = sar.Spec.User == "reader"
			_ = json.NewEncoder(w).Encode(sar)
		default:
			http.NotFound(w, req)
		}
	}))
	defer api.Close()

	filter, err := withStatusCredentials(filters.WithAuthenticationAndAuthorization)(&rest.Config{Host: api.URL}, api.Client())
	require.NoError(t, err)
	rows := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("[]")) })
	h, err := filter(logr.Discard(), rows)
	require.NoError(t, err)
	get := func(token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, statusPath, nil)
		if token != "" {
			req.Header.Set(statusTokenHeader, token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	assert.Equal(t, http.StatusUnauthorized, get("").Code)
	mu.Lock()
	assert.Empty(t, audiences, "no token, no TokenReview")
	mu.Unlock()

	assert.Equal(t, http.StatusForbidden, get("token-of-stranger").Code)
	ok := get("token-of-reader")
	assert.Equal(t, http.StatusOK, ok.Code)
	assert.Equal(t, "[]", ok.Body.String())

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, [][]string{{statusAudience}, {statusAudience}}, audiences)
	require.Len(t, sars, 2)
	for _, sar := range sars {
		require.NotNil(t, sar.NonResourceAttributes)
		assert.Equal(t, authorizationv1.NonResourceAttributes{Path: statusPath, Verb: "get"}, *sar.NonResourceAttributes)
	}
}

func TestRunFlags_statusBindAddressIsLoopbackOnly(t *testing.T) {
	cases := map[string]struct {
		addr    string
		wantErr string
	}{
		"the default, IPv4 loopback":      {addr: "127.0.0.1:8082"},
		"IPv6 loopback":                   {addr: "[::1]:8082"},
		"localhost":                       {addr: "localhost:8082"},
		"off":                             {addr: "0"},
		"every address is refused":        {addr: ":8082", wantErr: `"" is not a loopback address`},
		"the unspecified IP is refused":   {addr: "0.0.0.0:8082", wantErr: `"0.0.0.0" is not a loopback address`},
		"a pod's address is refused":      {addr: "10.0.0.7:8082", wantErr: `"10.0.0.7" is not a loopback address`},
		"a host name is refused":          {addr: "guard.example.com:8082", wantErr: "is not a loopback address"},
		"an address without a port fails": {addr: "127.0.0.1", wantErr: "missing port"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var o runOptions
			fs := newRunFlags(&o)
			fs.SetOutput(&strings.Builder{})
			err := fs.Parse([]string{"--status-bind-address", tc.addr})
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.addr, o.StatusAddr)
		})
	}
	var o runOptions
	require.NoError(t, newRunFlags(&o).Parse(nil))
	assert.Equal(t, "127.0.0.1:8082", o.StatusAddr)
}

// A 401 or 403 through the pods proxy is the guard's (plain text, which
// client-go marks as an unexpected server response) or the apiserver's (a
// Status object); only the guard's is explained as such.
func TestRefusedByGuard_tellsTheGuardFromTheAPIServer(t *testing.T) {
	reader := "system:serviceaccount:ns:" + statusReaderServiceAccount
	pods := schema.GroupResource{Resource: "pods"}
	cases := map[string]struct {
		err  error
		want string
	}{
		"the guard did not accept the token": {
			err:  apierrors.NewGenericServerResponse(401, "get", pods, "https:leader:8443", "Unauthorized", 0, true),
			want: "the leader did not accept the token of " + reader + " (401 Unauthorized): Unauthorized"},
		"the guard did not authorize the reader": {
			err:  apierrors.NewGenericServerResponse(403, "get", pods, "https:leader:8443", "Authorization denied for user "+reader, 0, true),
			want: "the leader does not let " + reader + " read /status (403 Forbidden; is the ClusterRole webhook-guard-status-reader bound to it?): Authorization denied for user " + reader},
		"the apiserver refused the caller":      {err: apierrors.NewForbidden(pods, "https:leader:8443", errors.New(`cannot get resource "pods/proxy"`))},
		"the apiserver did not know the caller": {err: apierrors.NewUnauthorized("Unauthorized")},
		"anything else is not a refusal":        {err: apierrors.NewGenericServerResponse(503, "get", pods, "https:leader:8443", "unavailable", 0, true)},
		"nor an error without a status":         {err: errors.New("dial tcp: connection refused")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := refusedByGuard(fmt.Errorf("wrapped: %w", tc.err), "ns")
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}
