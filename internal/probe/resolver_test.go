package probe

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func service(typ corev1.ServiceType, clusterIP string, ports ...int32) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "hook"},
		Spec:       corev1.ServiceSpec{Type: typ, ClusterIP: clusterIP},
	}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: p})
	}
	return svc
}

func TestServiceResolver_Resolve(t *testing.T) {
	tests := map[string]struct {
		objects   []client.Object
		port      int32
		want      string
		wantRoute bool // error wraps ErrNoRoute
		wantErr   bool
	}{
		"a ClusterIP service resolves to IP:port": {
			objects: []client.Object{service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443)},
			port:    443, want: "10.96.0.12:443",
		},
		"a non-443 port is honoured": {
			objects: []client.Object{service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443, 8443)},
			port:    8443, want: "10.96.0.12:8443",
		},
		"an IPv6 ClusterIP is bracketed": {
			objects: []client.Object{service(corev1.ServiceTypeClusterIP, "fd00::12", 443)},
			port:    443, want: "[fd00::12]:443",
		},
		"a NodePort service resolves to its ClusterIP": {
			objects: []client.Object{service(corev1.ServiceTypeNodePort, "10.96.0.13", 443)},
			port:    443, want: "10.96.0.13:443",
		},
		"an ExternalName service resolves to its external name": {
			objects: []client.Object{&corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "hook"},
				Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "hook.example.com"},
			}},
			port: 443, want: "hook.example.com:443",
		},
		"a missing service is no-route": {
			port: 443, wantErr: true, wantRoute: true,
		},
		"a headless service is no-route": {
			objects: []client.Object{service(corev1.ServiceTypeClusterIP, corev1.ClusterIPNone, 443)},
			port:    443, wantErr: true, wantRoute: true,
		},
		"a service without a ClusterIP is no-route": {
			objects: []client.Object{service(corev1.ServiceTypeClusterIP, "", 443)},
			port:    443, wantErr: true, wantRoute: true,
		},
		"a service without the port is no-route": {
			objects: []client.Object{service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443)},
			port:    8443, wantErr: true, wantRoute: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(tc.objects...).Build()
			got, err := NewServiceResolver(c).Resolve(t.Context(), "team", "hook", tc.port)
			if !tc.wantErr {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.wantRoute, errors.Is(err, ErrNoRoute), "err: %v", err)
		})
	}
}

func TestServiceResolver_Resolve_guardSideErrorsAreNotNoRoute(t *testing.T) {
	tests := map[string]error{
		"a Forbidden lookup":      apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "hook", errors.New("rbac")),
		"an Unauthorized lookup":  apierrors.NewUnauthorized("token expired"),
		"a canceled context":      context.Canceled,
		"an apiserver connection": errors.New("dial tcp 10.96.0.1:443: connect: connection refused"),
	}
	for name, lookupErr := range tests {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
				WithObjects(service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443)).
				WithInterceptorFuncs(interceptor.Funcs{
					Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
						return lookupErr
					},
				}).Build()
			_, err := NewServiceResolver(c).Resolve(t.Context(), "team", "hook", 443)
			require.Error(t, err)
			assert.NotErrorIs(t, err, ErrNoRoute)
			assert.ErrorIs(t, err, lookupErr)

			// Through the Prober, such an error is Unknown, never a failure.
			wh := serviceWebhook("team", "hook", nil, "/mutate", newTestCA(t).pem)
			res := (&Prober{Discovery: testDiscovery(), Resolver: NewServiceResolver(c)}).Probe(t.Context(), wh, Spec{})
			assert.Equal(t, OutcomeUnknown, res.Outcome)
		})
	}
}

// countingResolver counts the lookups that reach the apiserver.
type countingResolver struct {
	fakeResolver
	calls int
}

func (c *countingResolver) Resolve(ctx context.Context, namespace, name string, port int32) (string, error) {
	c.calls++
	return c.fakeResolver.Resolve(ctx, namespace, name, port)
}

// In steady state a probe of a service-backed webhook reads nothing from
// the apiserver; a failed probe makes the next one read the Service again.
func TestCachingResolver_noLookupPerProbeUntilAProbeFails(t *testing.T) {
	ca := newTestCA(t)
	var fail atomic.Bool
	srv, _ := startTLS(t, ca.leaf(t, []string{"hook.team.svc"}, nil), func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		answer(t, nil)(w, r)
	})
	next := &countingResolver{fakeResolver: fakeResolver{addr: srv.Listener.Addr().String()}}
	now := time.Now()
	p := &Prober{Discovery: testDiscovery(), Resolver: &CachingResolver{Next: next, Now: func() time.Time { return now }}}
	wh := serviceWebhook("team", "hook", ptr.To[int32](8443), "/mutate", ca.pem)
	for range 50 {
		require.Equal(t, OutcomeHealthy, p.Probe(t.Context(), wh, Spec{}).Outcome)
	}
	assert.Equal(t, 1, next.calls, "50 healthy probes, one lookup")
	now = now.Add(DefaultRecheck)
	fail.Store(true)
	for range 3 {
		require.Equal(t, OutcomeFailed, p.Probe(t.Context(), wh, Spec{}).Outcome)
	}
	assert.Equal(t, 2, next.calls, "the probe after a failure reads the Service again, and only once per Recheck")
}

func TestCachingResolver_expiresAndNeverRemembersErrors(t *testing.T) {
	now := time.Unix(1000, 0)
	next := &countingResolver{fakeResolver: fakeResolver{addr: "10.0.0.1:443"}}
	c := &CachingResolver{Next: next, TTL: time.Minute, Now: func() time.Time { return now }}
	for range 3 {
		_, err := c.Resolve(t.Context(), "team", "hook", 443)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, next.calls)
	now = now.Add(time.Minute)
	_, _ = c.Resolve(t.Context(), "team", "hook", 443)
	assert.Equal(t, 2, next.calls, "after the TTL")
	next.err = errors.New("apiserver down")
	now = now.Add(DefaultRecheck)
	c.Forget("team", "hook")
	for range 3 {
		_, err := c.Resolve(t.Context(), "team", "hook", 443)
		require.Error(t, err)
	}
	assert.Equal(t, 5, next.calls, "an error is not remembered")
}

// However many probes of a Service's webhooks fail at once, the Service
// is read again at most once per Recheck.
func TestCachingResolver_forgetsAtMostOncePerRecheck(t *testing.T) {
	now := time.Unix(1000, 0)
	next := &countingResolver{fakeResolver: fakeResolver{addr: "10.0.0.1:443"}}
	c := &CachingResolver{Next: next, Recheck: 5 * time.Second, Now: func() time.Time { return now }}
	for range 100 {
		c.Forget("team", "hook") // nothing remembered yet: nothing to drop
		_, err := c.Resolve(t.Context(), "team", "hook", 443)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, next.calls, "failures within Recheck of the read keep it")
	now = now.Add(5 * time.Second)
	for range 100 {
		c.Forget("team", "hook")
		_, err := c.Resolve(t.Context(), "team", "hook", 443)
		require.NoError(t, err)
	}
	assert.Equal(t, 2, next.calls, "one read again after Recheck")
	_, err := c.Resolve(t.Context(), "team", "other", 443)
	require.NoError(t, err)
	c.Forget("team", "hook")
	assert.Equal(t, 3, next.calls, "another Service is remembered apart")
}
