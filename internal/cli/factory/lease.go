package factory

import (
	"context"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// leaseNamespaceFlag is "guard run"'s flag that says where the
// leader-election Lease is.
const leaseNamespaceFlag = "--leader-election-namespace"

// LeaseNamespace returns the namespace of the installation's
// leader-election Lease: what its Deployment's --leader-election-namespace
// says (kube-system in the shipped manifests; $(POD_NAMESPACE) is the
// Deployment's namespace), else Namespace. A Deployment that cannot be
// read, or that does not say, leaves Namespace: a guard started by hand
// is told its Lease's namespace, and tests start it in theirs. It needs
// Complete first.
func (f *Factory) LeaseNamespace(ctx context.Context) string {
	if f.leaseNamespace != "" {
		return f.leaseNamespace
	}
	d := &appsv1.Deployment{}
	if err := f.Client.Get(ctx, client.ObjectKey{Namespace: f.GuardNamespace, Name: f.Deployment}, d); err != nil {
		d = nil
	}
	f.noteLeaseNamespace(d)
	return f.leaseNamespace
}

// noteLeaseNamespace remembers where d, the guard's Deployment (nil when
// it cannot be read), keeps the Lease, for LeaseNamespace: read once,
// whoever reads the Deployment first.
func (f *Factory) noteLeaseNamespace(d *appsv1.Deployment) {
	f.leaseNamespace = f.GuardNamespace
	if d == nil {
		return
	}
	if ns, ok := LeaseNamespaceOf(d); ok {
		f.leaseNamespace = ns
	}
}

// LeaseNamespaceOf returns the --leader-election-namespace of d's pods
// (LeaseNamespaceOfTemplate).
func LeaseNamespaceOf(d *appsv1.Deployment) (string, bool) {
	return LeaseNamespaceOfTemplate(d.Namespace, &d.Spec.Template)
}

// LeaseNamespaceOfTemplate returns the --leader-election-namespace of the
// first container in t that has the flag (the one that runs "guard run"),
// for pods in namespace, with $(VAR) expanded as the kubelet expands it
// from the container's env (a value, or the field metadata.namespace). It
// reports false when no container says, or the value cannot be expanded.
func LeaseNamespaceOfTemplate(namespace string, t *corev1.PodTemplateSpec) (string, bool) {
	for _, c := range t.Spec.Containers {
		var value string
		found := false
		for i, a := range c.Args {
			if v, ok := strings.CutPrefix(a, leaseNamespaceFlag+"="); ok {
				value, found = v, true
			} else if a == leaseNamespaceFlag && i+1 < len(c.Args) {
				value, found = c.Args[i+1], true
			}
		}
		if !found {
			continue
		}
		name, isVar := strings.CutPrefix(value, "$(")
		if !isVar {
			return value, value != ""
		}
		name, closed := strings.CutSuffix(name, ")")
		if !closed {
			return "", false
		}
		for _, e := range c.Env {
			if e.Name != name {
				continue
			}
			switch {
			case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
				return namespace, namespace != ""
			case e.ValueFrom == nil:
				return e.Value, e.Value != ""
			}
		}
		return "", false
	}
	return "", false
}
