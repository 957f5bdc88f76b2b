package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

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
