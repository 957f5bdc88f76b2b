package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceResolver is the Resolver used in the cluster: it reads the Service
// and returns ClusterIP:port, like kube-apiserver's ClusterIP service
// resolver (k8s.io/apiserver/pkg/util/proxy.ResolveCluster). It only reads.
type ServiceResolver struct {
	// Reader reads corev1.Services (a controller-runtime client or cache).
	Reader client.Reader
}

// NewServiceResolver returns a ServiceResolver reading Services through r.
func NewServiceResolver(r client.Reader) *ServiceResolver {
	return &ServiceResolver{Reader: r}
}

// Resolve returns ClusterIP:port of the Service namespace/name. A Service
// that does not exist, has no ClusterIP or ClusterIP "None", does not expose
// port, or has an unsupported type yields an error wrapping ErrNoRoute (the
// apiserver could not reach it either). ExternalName Services resolve to
// externalName:port, as in kube-apiserver. Any other lookup error (connection,
// Forbidden, Unauthorized, context canceled) is returned without ErrNoRoute,
// so the probe is Unknown.
func (r *ServiceResolver) Resolve(ctx context.Context, namespace, name string, port int32) (string, error) {
	if r == nil || r.Reader == nil {
		return "", errors.New("ServiceResolver has no Reader")
	}
	var svc corev1.Service
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("%w: service %s/%s not found", ErrNoRoute, namespace, name)
		}
		return "", fmt.Errorf("getting service %s/%s: %w", namespace, name, err)
	}
	portStr := strconv.Itoa(int(port))
	switch svc.Spec.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		ip := svc.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone {
			return "", fmt.Errorf("%w: service %s/%s has no ClusterIP (%q)", ErrNoRoute, namespace, name, ip)
		}
		if !hasPort(&svc, port) {
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

// DefaultResolutionTTL is how long CachingResolver trusts a resolution
// that no failed probe has put in doubt.
const DefaultResolutionTTL = 10 * time.Minute

// CachingResolver remembers each Service's resolution, so that a probe in
// steady state makes no apiserver request: a ClusterIP is fixed for the
// Service's life. A resolution is read again after a probe of the Service
// failed (the Prober calls Forget: the Service may have been re-created
// or lost its port), and after TTL. Errors are not remembered. It needs
// only get on Services, like ServiceResolver: no list, no watch.
type CachingResolver struct {
	// Next resolves what is not remembered (a ServiceResolver).
	Next Resolver
	// TTL bounds how long a resolution is trusted. Default
	// DefaultResolutionTTL.
	TTL time.Duration
	// Recheck is how soon after it was read a resolution may be dropped
	// by Forget. Default DefaultRecheck.
	Recheck time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time

	mu      sync.Mutex
	entries map[serviceKey]map[int32]resolution
}

type serviceKey struct{ namespace, name string }

type resolution struct {
	hostPort string
	at       time.Time
}

var _ Resolver = (*CachingResolver)(nil)

// Resolve returns the remembered resolution, or asks Next.
func (c *CachingResolver) Resolve(ctx context.Context, namespace, name string, port int32) (string, error) {
	ttl := c.TTL
	if ttl <= 0 {
		ttl = DefaultResolutionTTL
	}
	key := serviceKey{namespace, name}
	c.mu.Lock()
	r, ok := c.entries[key][port]
	c.mu.Unlock()
	if ok && c.now().Sub(r.at) < ttl {
		return r.hostPort, nil
	}
	hostPort, err := c.Next.Resolve(ctx, namespace, name, port)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(c.entries[key], port)
		return "", err
	}
	if c.entries == nil {
		c.entries = map[serviceKey]map[int32]resolution{}
	}
	if c.entries[key] == nil {
		c.entries[key] = map[int32]resolution{}
	}
	c.entries[key][port] = resolution{hostPort: hostPort, at: c.now()}
	return hostPort, nil
}

// DefaultRecheck is CachingResolver.Recheck's default.
const DefaultRecheck = 5 * time.Second

// Forget drops the Service's remembered resolutions that are at least
// Recheck old: however many of its webhooks' probes fail, the Service is
// read again at most once per Recheck, so a mass failure does not turn
// into one apiserver request per probe.
func (c *CachingResolver) Forget(namespace, name string) {
	recheck := c.Recheck
	if recheck <= 0 {
		recheck = DefaultRecheck
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for port, r := range c.entries[serviceKey{namespace, name}] {
		if c.now().Sub(r.at) >= recheck {
			delete(c.entries[serviceKey{namespace, name}], port)
		}
	}
}

func (c *CachingResolver) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
