package main

import (
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How GET /status is served to "guard status", and to nobody else.
//
// The guard serves /status on the metrics server (HTTPS), behind the same
// filter as /metrics: controller-runtime's
// filters.WithAuthenticationAndAuthorization, a TokenReview and then a
// SubjectAccessReview for verb get on the non-resource URL /status.
//
// "guard status" reaches the leader through kube-apiserver's pods proxy,
// and kube-apiserver deletes the Authorization header once it has
// authenticated the caller (k8s.io/apiserver, endpoints/filters
// WithAuthentication), so the person's own credentials, token or client
// certificate, never reach the pod. "guard status" therefore requests a
// token of its own with the TokenRequest API, for the ServiceAccount
// statusReaderServiceAccount and the audience statusAudience, and sends it
// in statusTokenHeader, which the apiserver forwards. withStatusCredentials
// moves it into Authorization before the filter runs.
const (
	// statusPath is the path of the probe counts.
	statusPath = "/status"
	// statusReaderServiceAccount is the ServiceAccount, in the
	// installation's namespace, whose tokens read /status. No pod runs as
	// it (deploy/kustomize/base/rbac/status_role.yaml).
	statusReaderServiceAccount = "webhook-guard-status-reader"
	// statusAudience is the only audience /status accepts, and the one
	// "guard status" requests. kube-apiserver accepts no token of this
	// audience, so a leaked status token reads /status and nothing else;
	// and a token of any other audience (a pod's, a kubeconfig's) cannot
	// read /status, whatever RBAC grants its owner.
	statusAudience = "webhook-guard.io/status"
	// statusTokenHeader carries the token through the apiserver's pods
	// proxy, which deletes Authorization.
	statusTokenHeader = "X-Webhook-Guard-Status-Token"
	// statusTokenSeconds is how long a token "guard status" requests
	// lives: the least the TokenRequest API grants.
	statusTokenSeconds = 600
)

// withStatusCredentials wraps a metrics FilterProvider (in run.go,
// controller-runtime's filters.WithAuthenticationAndAuthorization) so that
// a request for statusPath reaches the filter with its credentials in
// place:
//   - a token in statusTokenHeader replaces Authorization, and the header
//     is removed;
//   - the request's context requires statusAudience, so the filter's
//     TokenReview accepts only tokens requested for it.
//
// Every other path, /metrics included, reaches the filter unchanged.
func withStatusCredentials(provider func(*rest.Config, *http.Client) (metricsserver.Filter, error)) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(c *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
		filter, err := provider(c, hc)
		if err != nil {
			return nil, err
		}
		return func(log logr.Logger, next http.Handler) (http.Handler, error) {
			filtered, err := filter(log, next)
			if err != nil {
				return nil, err
			}
			return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Path == statusPath {
					req = statusCredentials(req)
				}
				filtered.ServeHTTP(w, req)
			}), nil
		}, nil
	}
}

// statusCredentials returns req with the token of statusTokenHeader, if
// any, as its bearer token, and statusAudience required of it.
func statusCredentials(req *http.Request) *http.Request {
	if token := strings.TrimSpace(req.Header.Get(statusTokenHeader)); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Del(statusTokenHeader)
	return req.WithContext(authenticator.WithAudiences(req.Context(), authenticator.Audiences{statusAudience}))
}
