package probe

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
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

func TestServiceAddress(t *testing.T) {
	tests := map[string]struct {
		svc       *corev1.Service
		port      int32
		want      string
		wantRoute bool // error wraps ErrNoRoute
	}{
		"a ClusterIP service resolves to IP:port": {
			svc: service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443), port: 443, want: "10.96.0.12:443",
		},
		"an unset type is ClusterIP": {
			svc: service("", "10.96.0.12", 443), port: 443, want: "10.96.0.12:443",
		},
		"a non-443 port is honoured": {
			svc: service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443, 8443), port: 8443, want: "10.96.0.12:8443",
		},
		"an IPv6 ClusterIP is bracketed": {
			svc: service(corev1.ServiceTypeClusterIP, "fd00::12", 443), port: 443, want: "[fd00::12]:443",
		},
		"a NodePort service resolves to its ClusterIP": {
			svc: service(corev1.ServiceTypeNodePort, "10.96.0.13", 443), port: 443, want: "10.96.0.13:443",
		},
		"a LoadBalancer service resolves to its ClusterIP": {
			svc: service(corev1.ServiceTypeLoadBalancer, "10.96.0.14", 443), port: 443, want: "10.96.0.14:443",
		},
		"an ExternalName service resolves to its external name": {
			svc: &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "hook"},
				Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "hook.example.com"},
			},
			port: 443, want: "hook.example.com:443",
		},
		"an ExternalName service without a name is no-route": {
			svc:  &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}},
			port: 443, wantRoute: true,
		},
		"a missing service is no-route": {
			svc: nil, port: 443, wantRoute: true,
		},
		"a headless service is no-route": {
			svc: service(corev1.ServiceTypeClusterIP, corev1.ClusterIPNone, 443), port: 443, wantRoute: true,
		},
		"a service without a ClusterIP is no-route": {
			svc: service(corev1.ServiceTypeClusterIP, "", 443), port: 443, wantRoute: true,
		},
		"a service without the port is no-route": {
			svc: service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443), port: 8443, wantRoute: true,
		},
		"an unknown type is no-route": {
			svc: service("Mystery", "10.96.0.12", 443), port: 443, wantRoute: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := serviceAddress("team", "hook", tc.svc, tc.port)
			if !tc.wantRoute {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNoRoute)
		})
	}
}

// startResolver runs a WatchingResolver on cs until the test ends, with
// a backoff between a watch's attempts short enough for tests.
func startResolver(t *testing.T, cs *kubefake.Clientset) *WatchingResolver {
	t.Helper()
	r := NewWatchingResolver(cs)
	r.backoff = &wait.Backoff{Duration: time.Millisecond, Cap: 10 * time.Millisecond, Steps: 10, Factor: 2}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("the resolver's watches did not stop with its context")
		}
	})
	return r
}

// apiserver is a fake clientset whose list and watch of Services can be
// made to fail or to hang, and whose watches the test controls.
type apiserver struct {
	*kubefake.Clientset

	mu       sync.Mutex
	watchers []*watch.FakeWatcher
	// fields are the field selectors of watchers, one each.
	fields []string
	// down, when set, is the answer to every Services request: an error,
	// or errHang for a request that never returns (until the test ends).
	down    atomic.Pointer[error]
	hang    chan struct{}
	calls   atomic.Int64 // Services requests of any verb
	refused chan string  // the verb of each request answered while down
}

var errHang = errors.New("hang")

func newAPIServer(t *testing.T, objects ...runtime.Object) *apiserver {
	a := &apiserver{Clientset: kubefake.NewClientset(objects...), hang: make(chan struct{}), refused: make(chan string, 100)}
	t.Cleanup(func() { close(a.hang) })
	outage := func(verb string) (bool, error) {
		a.calls.Add(1)
		p := a.down.Load()
		if p == nil {
			return false, nil
		}
		select {
		case a.refused <- verb:
		default:
		}
		if *p == errHang {
			<-a.hang
			return true, errors.New("the test ended")
		}
		return true, *p
	}
	a.PrependReactor("*", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		handled, err := outage(action.GetVerb())
		return handled, nil, err
	})
	a.PrependWatchReactor("services", func(action k8stesting.Action) (bool, watch.Interface, error) {
		if handled, err := outage("watch"); handled {
			return true, nil, err
		}
		w := watch.NewFake()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.watchers = append(a.watchers, w)
		a.fields = append(a.fields, action.(k8stesting.WatchAction).GetWatchRestrictions().Fields.String())
		return true, w, nil
	})
	return a
}

// watcher returns the watch the resolver holds open: the last one.
func (a *apiserver) watcher(t *testing.T) *watch.FakeWatcher {
	t.Helper()
	var w *watch.FakeWatcher
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if len(a.watchers) > 0 {
			w = a.watchers[len(a.watchers)-1]
		}
		return w != nil
	}, 5*time.Second, time.Millisecond, "the resolver never watched")
	return w
}

// watcherOf returns the last watch of the Service team/name: each
// Service has a watch of its own, and the resolver may open one only
// after its first list answered a Resolve.
func (a *apiserver) watcherOf(t *testing.T, name string) *watch.FakeWatcher {
	t.Helper()
	want := "metadata.name=" + name
	var w *watch.FakeWatcher
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for i := len(a.watchers) - 1; i >= 0 && w == nil; i-- {
			if a.fields[i] == want {
				w = a.watchers[i]
			}
		}
		return w != nil
	}, 5*time.Second, time.Millisecond, "the resolver never watched Service team/%s", name)
	return w
}

// expire ends the open watch the way kube-apiserver ends one whose
// resourceVersion is too old: the reflector must list again.
func (a *apiserver) expire(t *testing.T) {
	t.Helper()
	a.watcher(t).Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
}

func (a *apiserver) goDown(err error) { a.down.Store(&err) }

// resolveWithin resolves with a deadline, and fails the test if Resolve
// itself does not return soon after it: a Resolve that waits on a hanging
// apiserver request must not hang the test.
func resolveWithin(t *testing.T, r *WatchingResolver, timeout time.Duration, name string, port int32) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	type answer struct {
		hostPort string
		err      error
	}
	done := make(chan answer, 1)
	go func() {
		hostPort, err := r.Resolve(ctx, "team", name, port)
		done <- answer{hostPort, err}
	}()
	select {
	case a := <-done:
		return a.hostPort, a.err
	case <-time.After(timeout + 5*time.Second):
		t.Fatalf("Resolve of team/%s did not return within its context", name)
		return "", nil
	}
}

// webhookService is a ClusterIP Service team/hook at 127.0.0.1 exposing
// the port of srv's listener.
func webhookService(t *testing.T, addr net.Addr) (*corev1.Service, int32) {
	t.Helper()
	_, portStr, err := net.SplitHostPort(addr.String())
	require.NoError(t, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)
	return service(corev1.ServiceTypeClusterIP, "127.0.0.1", int32(port)), int32(port)
}

// Once a Service has been resolved, no probe asks the apiserver anything
// about it: not a healthy one, not a failed one, not the one after a
// failure. (Once, a failed probe made the next one GET the
// Service, and under an outage that GET timed out: the probe was Unknown.)
func TestWatchingResolver_noRequestAfterFirstResolution(t *testing.T) {
	ca := newTestCA(t)
	var fail atomic.Bool
	srv, _ := startTLS(t, ca.leaf(t, []string{"hook.team.svc"}, nil), func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		answer(t, nil)(w, r)
	})
	svc, port := webhookService(t, srv.Listener.Addr())
	cs := kubefake.NewClientset(svc)
	p := &Prober{Discovery: testDiscovery(), Resolver: startResolver(t, cs)}
	wh := serviceWebhook("team", "hook", ptr.To(port), "/mutate", ca.pem)

	require.Equal(t, OutcomeHealthy, p.Probe(t.Context(), wh, Spec{}).Outcome)
	// The watch starts just after the list that answered.
	require.Eventually(t, func() bool { return len(cs.Actions()) >= 2 }, 5*time.Second, time.Millisecond)
	first := len(cs.Actions())
	require.Equal(t, 2, first, "the first resolution lists and watches the Service: %v", cs.Actions())
	for range 20 {
		require.Equal(t, OutcomeHealthy, p.Probe(t.Context(), wh, Spec{}).Outcome)
	}
	fail.Store(true)
	for range 20 {
		res := p.Probe(t.Context(), wh, Spec{})
		require.Equal(t, OutcomeFailed, res.Outcome, "err: %v", res.Err)
		require.Equal(t, ReasonHTTPStatus, res.Reason)
	}
	fail.Store(false)
	require.Equal(t, OutcomeHealthy, p.Probe(t.Context(), wh, Spec{}).Outcome)
	assert.Len(t, cs.Actions(), first, "no apiserver request after the first resolution: %v", cs.Actions()[first:])
}

// While the apiserver errors or hangs, even while the watch is down and
// the reflector lists again in vain, the last resolution stands.
func TestWatchingResolver_keepsTheLastAnswerWhileTheAPIServerIsDown(t *testing.T) {
	tests := map[string]error{
		"the apiserver refuses":       errors.New("dial tcp 10.96.0.1:443: connect: connection refused"),
		"the apiserver is overloaded": apierrors.NewTooManyRequests("the server has received too many requests", 1),
		"the guard lost its RBAC":     apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("rbac")),
		"the apiserver hangs":         errHang,
	}
	for name, outage := range tests {
		t.Run(name, func(t *testing.T) {
			a := newAPIServer(t, service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443))
			r := startResolver(t, a.Clientset)
			got, err := resolveWithin(t, r, 5*time.Second, "hook", 443)
			require.NoError(t, err)
			require.Equal(t, "10.96.0.12:443", got)

			a.watcher(t) // the watch is open before the outage refuses it
			a.goDown(outage)
			a.expire(t)
			select {
			case verb := <-a.refused:
				assert.Equal(t, "list", verb, "the reflector lists again after its watch expired")
			case <-time.After(5 * time.Second):
				t.Fatal("the reflector did not list again after its watch expired")
			}
			calls := a.calls.Load()
			for range 20 {
				got, err := resolveWithin(t, r, 100*time.Millisecond, "hook", 443)
				require.NoError(t, err)
				assert.Equal(t, "10.96.0.12:443", got)
			}
			if outage == errHang {
				assert.Equal(t, calls, a.calls.Load(), "Resolve made a request while the apiserver hung")
			}
		})
	}
}

// The resolution changes only when the apiserver says the Service
// changed: a watch event, or a list after the watch ended.
func TestWatchingResolver_followsTheAPIServersWord(t *testing.T) {
	resolve := func(t *testing.T, r *WatchingResolver) (string, error) {
		t.Helper()
		return resolveWithin(t, r, 5*time.Second, "hook", 443)
	}
	eventually := func(t *testing.T, r *WatchingResolver, want string, wantRoute bool) {
		t.Helper()
		require.Eventually(t, func() bool {
			got, err := resolve(t, r)
			if wantRoute {
				return errors.Is(err, ErrNoRoute)
			}
			return err == nil && got == want
		}, 5*time.Second, time.Millisecond, "want %q (no-route: %t)", want, wantRoute)
	}

	t.Run("a watch event with another ClusterIP moves it", func(t *testing.T) {
		a := newAPIServer(t, service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443))
		r := startResolver(t, a.Clientset)
		got, err := resolve(t, r)
		require.NoError(t, err)
		require.Equal(t, "10.96.0.12:443", got)
		a.watcher(t).Modify(service(corev1.ServiceTypeClusterIP, "10.96.0.99", 443))
		eventually(t, r, "10.96.0.99:443", false)
	})
	t.Run("a watch event that removes the port makes it no-route", func(t *testing.T) {
		a := newAPIServer(t, service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443))
		r := startResolver(t, a.Clientset)
		_, err := resolve(t, r)
		require.NoError(t, err)
		a.watcher(t).Modify(service(corev1.ServiceTypeClusterIP, "10.96.0.12", 8443))
		eventually(t, r, "", true)
	})
	t.Run("a delete event drops it, and an add brings it back", func(t *testing.T) {
		a := newAPIServer(t, service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443))
		r := startResolver(t, a.Clientset)
		_, err := resolve(t, r)
		require.NoError(t, err)
		w := a.watcher(t)
		w.Delete(service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443))
		eventually(t, r, "", true)
		w.Add(service(corev1.ServiceTypeClusterIP, "10.96.0.13", 443))
		eventually(t, r, "10.96.0.13:443", false)
	})
	t.Run("a list after the watch expired drops a Service deleted meanwhile", func(t *testing.T) {
		a := newAPIServer(t, service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443))
		r := startResolver(t, a.Clientset)
		_, err := resolve(t, r)
		require.NoError(t, err)
		// The apiserver deletes it while the resolver's watch misses it.
		require.NoError(t, a.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("services"), "team", "hook"))
		got, err := resolve(t, r)
		require.NoError(t, err, "nothing told the resolver yet")
		assert.Equal(t, "10.96.0.12:443", got)
		a.expire(t)
		eventually(t, r, "", true)
	})
	t.Run("another Service in the namespace changes nothing", func(t *testing.T) {
		other := service(corev1.ServiceTypeClusterIP, "10.96.0.50", 443)
		other.Name = "other"
		a := newAPIServer(t, service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443), other)
		r := startResolver(t, a.Clientset)
		got, err := resolve(t, r)
		require.NoError(t, err)
		assert.Equal(t, "10.96.0.12:443", got)
		got, err = resolveWithin(t, r, 5*time.Second, "other", 443)
		require.NoError(t, err)
		assert.Equal(t, "10.96.0.50:443", got)
		a.watcherOf(t, "other").Delete(other)
		require.Eventually(t, func() bool {
			_, err = resolveWithin(t, r, 5*time.Second, "other", 443)
			return errors.Is(err, ErrNoRoute)
		}, 5*time.Second, time.Millisecond)
		got, err = resolve(t, r)
		require.NoError(t, err)
		assert.Equal(t, "10.96.0.12:443", got)
	})
	t.Run("a Service the apiserver does not have is no-route", func(t *testing.T) {
		a := newAPIServer(t)
		r := startResolver(t, a.Clientset)
		_, err := resolve(t, r)
		assert.ErrorIs(t, err, ErrNoRoute)
	})
}

// The first resolution of a Service needs one answer from the apiserver.
// Without it the error is the guard's side, never no-route, and the
// probe is Unknown: bounded by the probe's context when the apiserver
// hangs, at once when the attempt failed.
func TestWatchingResolver_firstResolutionWithoutTheAPIServerIsUnknown(t *testing.T) {
	tests := map[string]struct {
		outage  error
		wantErr error
	}{
		"the apiserver hangs": {outage: errHang, wantErr: context.DeadlineExceeded},
		"a Forbidden list":    {outage: apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("rbac"))},
		"an Unauthorized list": {
			outage: apierrors.NewUnauthorized("token expired"),
		},
		"an apiserver connection": {outage: errors.New("dial tcp 10.96.0.1:443: connect: connection refused")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			want := tc.wantErr
			if want == nil {
				want = tc.outage
			}
			a := newAPIServer(t, service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443))
			a.goDown(tc.outage)
			r := startResolver(t, a.Clientset)

			for range 3 {
				_, err := resolveWithin(t, r, 200*time.Millisecond, "hook", 443)
				require.Error(t, err)
				assert.NotErrorIs(t, err, ErrNoRoute)
				assert.ErrorIs(t, err, want)
			}

			// Through the Prober, such an error is Unknown, never a failure.
			wh := serviceWebhook("team", "hook", nil, "/mutate", newTestCA(t).pem)
			res := (&Prober{Discovery: testDiscovery(), Resolver: r}).Probe(t.Context(), wh, Spec{Timeout: 200 * time.Millisecond})
			assert.Equal(t, OutcomeUnknown, res.Outcome, "err: %v", res.Err)
		})
	}
}

// Before Start, and after its context ended, Resolve answers no-route
// never: the guard could not look.
func TestWatchingResolver_Resolve_notRunning(t *testing.T) {
	cs := kubefake.NewClientset(service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443))
	r := NewWatchingResolver(cs)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := r.Resolve(ctx, "team", "hook", 443)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoRoute)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	runCtx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(runCtx) }()
	got, err := r.Resolve(t.Context(), "team", "hook", 443)
	require.NoError(t, err)
	assert.Equal(t, "10.96.0.12:443", got)
	stop()
	require.NoError(t, <-done)
	_, err = r.Resolve(t.Context(), "team", "other", 443)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoRoute)
	assert.Error(t, r.Start(t.Context()), "a second Start")

	var empty WatchingResolver
	_, err = empty.Resolve(t.Context(), "team", "hook", 443)
	assert.NotErrorIs(t, err, ErrNoRoute)
}

// A Service warmed before it is first resolved (a follower warming its
// targets' Services) resolves from the store at once, even after the
// apiserver went down, where an unwarmed first resolution is Unknown.
func TestWatchingResolver_warmResolvesWithoutWaiting(t *testing.T) {
	a := newAPIServer(t, service(corev1.ServiceTypeClusterIP, "10.96.0.12", 443))
	r := startResolver(t, a.Clientset)
	require.NoError(t, r.Warm(t.Context(), "team", "hook"))
	require.Eventually(t, func() bool {
		w, err := r.watch(t.Context(), serviceKey{"team", "hook"})
		require.NoError(t, err)
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.synced
	}, 5*time.Second, time.Millisecond, "the warmed watch never listed")
	a.goDown(errHang)
	hostPort, err := resolveWithin(t, r, 200*time.Millisecond, "hook", 443)
	require.NoError(t, err, "a warmed Service resolves while the apiserver hangs")
	assert.Equal(t, "10.96.0.12:443", hostPort)
	_, err = resolveWithin(t, r, 200*time.Millisecond, "other", 443)
	require.Error(t, err, "an unwarmed Service's first resolution waits on the hanging apiserver")
}
