package status

import (
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// FilterProvider is the type of controller-runtime's metrics server
// FilterProvider option.
type FilterProvider = func(*rest.Config, *http.Client) (metricsserver.Filter, error)

// WithCredentials wraps a metrics FilterProvider ("guard run" wraps
// controller-runtime's filters.WithAuthenticationAndAuthorization) so that
// a request for Path reaches the filter with its credentials in place:
//   - a token in TokenHeader replaces Authorization, and the header is
//     removed;
//   - the request's context requires Audience, so the filter's
//     TokenReview accepts only tokens requested for it.
//
// Every other path, /metrics included, reaches the filter unchanged.
func WithCredentials(provider FilterProvider) FilterProvider {
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
				if req.URL.Path == Path {
					req = credentials(req)
				}
				filtered.ServeHTTP(w, req)
			}), nil
		}, nil
	}
}

// credentials returns req with the token of TokenHeader, if any, as its
// bearer token, and Audience required of it.
func credentials(req *http.Request) *http.Request {
	if token := strings.TrimSpace(req.Header.Get(TokenHeader)); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Del(TokenHeader)
	return req.WithContext(authenticator.WithAudiences(req.Context(), authenticator.Audiences{Audience}))
}
