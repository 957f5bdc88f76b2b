package status

import (
	"encoding/json"
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
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// What reaches the metrics filter: on /status, the token of
// TokenHeader as the bearer token and Audience required;
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
			path: Path, header: "reader-token", wantAuth: "Bearer reader-token", wantAudiences: authenticator.Audiences{Audience}},
		"the token header replaces a bearer token on /status": {
			path: Path, header: "reader-token", auth: "Bearer other", wantAuth: "Bearer reader-token", wantAudiences: authenticator.Audiences{Audience}},
		"a bearer token on /status must be of the status audience too": {
			path: Path, auth: "Bearer own", wantAuth: "Bearer own", wantAudiences: authenticator.Audiences{Audience}},
		"no credentials on /status stay none": {
			path: Path, wantAudiences: authenticator.Audiences{Audience}},
		"/metrics is untouched: the header is no credential there": {
			path: "/metrics", header: "reader-token", auth: "Bearer scraper", wantAuth: "Bearer scraper", wantHeaderForwarded: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got *http.Request
			provider := WithCredentials(func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
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
				req.Header.Set(TokenHeader, tc.header)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			require.NotNil(t, got)
			assert.Equal(t, tc.wantAuth, got.Header.Get("Authorization"))
			assert.Equal(t, tc.wantHeaderForwarded, got.Header.Get(TokenHeader) != "")
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

	filter, err := WithCredentials(filters.WithAuthenticationAndAuthorization)(&rest.Config{Host: api.URL}, api.Client())
	require.NoError(t, err)
	rows := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("[]")) })
	h, err := filter(logr.Discard(), rows)
	require.NoError(t, err)
	get := func(token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, Path, nil)
		if token != "" {
			req.Header.Set(TokenHeader, token)
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
	assert.Equal(t, [][]string{{Audience}, {Audience}}, audiences)
	require.Len(t, sars, 2)
	for _, sar := range sars {
		require.NotNil(t, sar.NonResourceAttributes)
		assert.Equal(t, authorizationv1.NonResourceAttributes{Path: Path, Verb: "get"}, *sar.NonResourceAttributes)
	}
}
