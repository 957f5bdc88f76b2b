package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// serviceAddress returns host:port at which kube-apiserver calls port of
// the Service namespace/name, svc, like its ClusterIP service resolver
// (k8s.io/apiserver/pkg/util/proxy.ResolveCluster). A Service that does
// not exist (svc nil), has no ClusterIP or ClusterIP "None", does not
// expose port, or has an unsupported type yields an error wrapping
// ErrNoRoute (the apiserver could not reach it either). ExternalName
// Services resolve to externalName:port, as in kube-apiserver.
func serviceAddress(namespace, name string, svc *corev1.Service, port int32) (string, error) {
	if svc == nil {
		return "", fmt.Errorf("%w: service %s/%s not found", ErrNoRoute, namespace, name)
	}
	portStr := strconv.Itoa(int(port))
	switch svc.Spec.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		ip := svc.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone {
			return "", fmt.Errorf("%w: service %s/%s has no ClusterIP (%q)", ErrNoRoute, namespace, name, ip)
		}
		if !hasPort(svc, port) {
			return "", fmt.Errorf("%w: service %s/%s has no port %d", ErrNoRoute, namespace, name, port)
		}
		return net.JoinHostPort(ip, portStr), nil
	case corev1.ServiceTypeExternalName:
		if svc.Spec.ExternalName == "" {
			return "", fmt.Errorf("%w: service %s/%s has no externalName", ErrNoRoute, namespace, name)
		}
		return net.JoinHostPort(svc.Spec.ExternalName, portStr), nil
	default:
		return "", fmt.Errorf("%w: service %s/%s has unsupported type %q", ErrNoRoute, namespace, name, svc.Spec.Type)
	}
}

func hasPort(svc *corev1.Service, port int32) bool {
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return true
		}
	}
	return false
}

// WatchingResolver is the Resolver used in the cluster. It resolves a
// Service from a watch of that one Service (list and watch in its
// namespace, field selector metadata.name), started the first time the
// Service is asked for, so that a probe's verdict never waits on an
// apiserver request once the Service has been resolved: under an outage
// the apiserver's seats fill with requests waiting on the failing
// webhook, and a probe that read the Service then would be Unknown
// exactly when it matters (docs/how-it-works.md, "Service resolution").
//
// Its contract:
//   - The first Resolve of a Service waits, within its ctx, for the
//     watch's first list. If that list fails or ctx ends first, the error
//     does not wrap ErrNoRoute (the probe is Unknown); later calls return
//     the failure at once until a list succeeds.
//   - After that first list, Resolve reads only its own store and makes
//     no apiserver request. The store changes only when the apiserver
//     says so: a watch event, or a list that succeeded. While the
//     apiserver is slow or unreachable, the last answer stays.
//   - A Service the apiserver says does not exist is a no-route failure.
//
// It only lists and watches Services. Start runs it; its watches end
// with Start's context. A WatchingResolver must not be copied after
// first use.
type WatchingResolver struct {
	// Client lists and watches Services. Required.
	Client kubernetes.Interface

	mu      sync.Mutex
	once    sync.Once
	started chan struct{} // closed by Start
	ctx     context.Context
	stopped bool
	watches map[serviceKey]*serviceWatch
	running sync.WaitGroup

	// backoff, when set, replaces client-go's backoff between a watch's
	// attempts (tests).
	backoff *wait.Backoff
}

// NewWatchingResolver returns a WatchingResolver listing and watching
// Services through c. It resolves nothing until Start runs.
func NewWatchingResolver(c kubernetes.Interface) *WatchingResolver {
	return &WatchingResolver{Client: c}
}

var _ Resolver = (*WatchingResolver)(nil)

type serviceKey struct{ namespace, name string }

func (r *WatchingResolver) init() {
	r.once.Do(func() {
		r.started = make(chan struct{})
		r.watches = map[serviceKey]*serviceWatch{}
	})
}

// Start lets Resolve start watches, which run until ctx ends; it then
// waits for them to stop and returns nil. It has the shape of a
// controller-runtime manager.Runnable and is called once.
func (r *WatchingResolver) Start(ctx context.Context) error {
	r.init()
	if r.Client == nil {
		return errors.New("WatchingResolver has no Client")
	}
	r.mu.Lock()
	if r.ctx != nil {
		r.mu.Unlock()
		return errors.New("WatchingResolver started twice")
	}
	r.ctx = ctx
	close(r.started)
	r.mu.Unlock()

	<-ctx.Done()
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.running.Wait()
	return nil
}

// NeedLeaderElection is false: the resolver runs on every replica, so it
// is running before the leader's probes ask it anything. It starts a
// watch when a probe asks for a Service, or when it is warmed (Warm): a
// follower watches its targets' Services before it leads.
func (r *WatchingResolver) NeedLeaderElection() bool { return false }

// Warm starts the watch of Service namespace/name if it has not started,
// without waiting for its first list: every replica warms its targets'
// Services (breaker.ServiceWarmer), so that a new leader resolves its
// first probes from its own store. It waits, within ctx, for Start.
func (r *WatchingResolver) Warm(ctx context.Context, namespace, name string) error {
	_, err := r.watch(ctx, serviceKey{namespace, name})
	return err
}

// Resolve returns host:port of the Service namespace/name from the
// Service's watch; see WatchingResolver for when it waits and which
// errors wrap ErrNoRoute.
func (r *WatchingResolver) Resolve(ctx context.Context, namespace, name string, port int32) (string, error) {
	w, err := r.watch(ctx, serviceKey{namespace, name})
	if err != nil {
		return "", fmt.Errorf("watching service %s/%s: %w", namespace, name, err)
	}
	svc, err := w.service(ctx, namespace+"/"+name)
	if err != nil {
		return "", fmt.Errorf("watching service %s/%s: %w", namespace, name, err)
	}
	return serviceAddress(namespace, name, svc, port)
}

// watch returns the Service's watch, starting it on first use. It waits,
// within ctx, for Start.
func (r *WatchingResolver) watch(ctx context.Context, key serviceKey) (*serviceWatch, error) {
	if r == nil || r.Client == nil {
		return nil, errors.New("WatchingResolver has no Client")
	}
	r.init()
	select {
	case <-r.started:
	case <-ctx.Done():
		return nil, fmt.Errorf("the resolver has not started: %w", context.Cause(ctx))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || r.ctx.Err() != nil {
		return nil, errors.New("the resolver has stopped")
	}
	if w, ok := r.watches[key]; ok {
		return w, nil
	}
	w := newServiceWatch()
	r.watches[key] = w
	reflector := cache.NewReflectorWithOptions(w.listerWatcher(r.Client, key), &corev1.Service{}, w,
		cache.ReflectorOptions{Name: "service " + key.namespace + "/" + key.name, Backoff: r.backoff})
	r.running.Go(func() { reflector.RunWithContext(r.ctx) })
	return w, nil
}

// serviceWatch is the store of one Service's reflector. It knows whether
// the reflector's first list has succeeded, and the error of the last
// attempt until then.
type serviceWatch struct {
	store cache.Store

	mu      sync.Mutex
	synced  bool
	err     error         // the last list or watch error before synced
	changed chan struct{} // closed and replaced when synced or err changes
}

func newServiceWatch() *serviceWatch {
	return &serviceWatch{store: cache.NewStore(cache.MetaNamespaceKeyFunc), changed: make(chan struct{})}
}

// listerWatcher lists and watches the Service key, and records each
// failure to do so until the first list succeeds.
func (w *serviceWatch) listerWatcher(c kubernetes.Interface, key serviceKey) cache.ListerWatcher {
	byName := fields.OneTermEqualSelector("metadata.name", key.name).String()
	services := c.CoreV1().Services(key.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = byName
			list, err := services.List(ctx, opts)
			if err != nil {
				w.failed(fmt.Errorf("listing: %w", err))
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = byName
			wi, err := services.Watch(ctx, opts)
			if err != nil {
				w.failed(fmt.Errorf("watching: %w", err))
			}
			return wi, err
		},
	}
	// A fake clientset says it cannot serve watch-list; a real one can.
	return cache.ToListWatcherWithWatchListSemantics(lw, c)
}

// failed records err if the first list has not succeeded yet.
func (w *serviceWatch) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.synced {
		return
	}
	w.err = err
	close(w.changed)
	w.changed = make(chan struct{})
}

// service returns the Service with key, nil when the apiserver says it
// does not exist. Until the first list has succeeded, it waits within ctx
// for that list or the failure of the attempt under way, whichever comes
// first; once an attempt has failed it returns that failure at once.
func (w *serviceWatch) service(ctx context.Context, key string) (*corev1.Service, error) {
	for {
		w.mu.Lock()
		synced, err, changed := w.synced, w.err, w.changed
		w.mu.Unlock()
		if synced {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("no answer from the apiserver yet: %w", err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the first list: %w", context.Cause(ctx))
		}
	}
	obj, ok, err := w.store.GetByKey(key)
	if err != nil || !ok {
		return nil, err
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, fmt.Errorf("the watch holds a %T, not a Service", obj)
	}
	return svc, nil
}

// The reflector's store: every change is the apiserver's word.

func (w *serviceWatch) Add(obj any) error    { return w.store.Add(obj) }
func (w *serviceWatch) Update(obj any) error { return w.store.Update(obj) }
func (w *serviceWatch) Delete(obj any) error { return w.store.Delete(obj) }
func (w *serviceWatch) Resync() error        { return w.store.Resync() }

// Replace is a list's answer: the first one makes the watch synced.
func (w *serviceWatch) Replace(list []any, resourceVersion string) error {
	err := w.store.Replace(list, resourceVersion)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && !w.synced {
		w.synced, w.err = true, nil
		close(w.changed)
	}
	return err
}

var _ cache.ReflectorStore = (*serviceWatch)(nil)
