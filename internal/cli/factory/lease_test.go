package factory

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// guardDeployment is a Deployment in namespace guard whose container runs
// "guard run" with args and env.
func guardDeployment(args []string, env ...corev1.EnvVar) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "guard", Name: DefaultDeployment}}
	d.Spec.Template.Spec.Containers = []corev1.Container{
		{Name: "sidecar", Args: []string{"--verbose"}},
		{Name: "manager", Args: append([]string{"run"}, args...), Env: env},
	}
	return d
}

var podNamespace = corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}

func TestLeaseNamespaceOf_readsTheFlagAsTheKubeletExpandsIt(t *testing.T) {
	for name, tc := range map[string]struct {
		d      *appsv1.Deployment
		want   string
		wantOK bool
	}{
		"kube-system, as shipped":            {guardDeployment([]string{"--leader-elect", "--leader-election-namespace=kube-system"}), "kube-system", true},
		"the flag and its value apart":       {guardDeployment([]string{"--leader-election-namespace", "leases"}), "leases", true},
		"$(POD_NAMESPACE), as before":        {guardDeployment([]string{"--leader-election-namespace=$(POD_NAMESPACE)"}, podNamespace), "guard", true},
		"$(VAR) with a value":                {guardDeployment([]string{"--leader-election-namespace=$(LEASES)"}, corev1.EnvVar{Name: "LEASES", Value: "leases"}), "leases", true},
		"$(VAR) the container does not set":  {guardDeployment([]string{"--leader-election-namespace=$(LEASES)"}, podNamespace), "", false},
		"$(VAR) from another field":          {guardDeployment([]string{"--leader-election-namespace=$(NODE)"}, corev1.EnvVar{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}), "", false},
		"no flag: the binary's default":      {guardDeployment([]string{"--leader-elect"}), "", false},
		"the flag with nothing after it":     {guardDeployment([]string{"--leader-election-namespace"}), "", false},
		"the last of two, as pflag takes it": {guardDeployment([]string{"--leader-election-namespace=a", "--leader-election-namespace=b"}), "b", true},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := LeaseNamespaceOf(tc.d)
			assert.Equal(t, tc.wantOK, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFactory_LeaseNamespace(t *testing.T) {
	for name, tc := range map[string]struct {
		objs []client.Object
		want string
	}{
		"where the Deployment says":                {[]client.Object{guardDeployment([]string{"--leader-election-namespace=kube-system"})}, "kube-system"},
		"the installation's, when it does not say": {[]client.Object{guardDeployment(nil)}, "guard"},
		"the installation's, without a Deployment": {nil, "guard"},
	} {
		t.Run(name, func(t *testing.T) {
			f := New(func(clientcmd.ClientConfig) (*rest.Config, error) { return &rest.Config{}, nil })
			f.GuardNamespace = "guard"
			f.Client = fake.NewClientBuilder().WithScheme(Scheme).WithObjects(tc.objs...).Build()
			assert.Equal(t, tc.want, f.LeaseNamespace(context.Background()))
		})
	}
}

// ReadInstalledConfig has read the Deployment already: LeaseNamespace
// takes its answer from it and reads it no more.
func TestFactory_LeaseNamespace_fromTheInstalledConfigsRead(t *testing.T) {
	d := guardDeployment([]string{"--leader-election-namespace=kube-system"})
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "webhook-guard-config"}}}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "guard", Name: "webhook-guard-config"}, Data: map[string]string{"config.yaml": installed}}
	f := New(func(clientcmd.ClientConfig) (*rest.Config, error) { return &rest.Config{}, nil })
	f.GuardNamespace = "guard"
	f.Client = fake.NewClientBuilder().WithScheme(Scheme).WithObjects(d, cm).Build()
	require.NoError(t, f.ReadInstalledConfig(context.Background()))
	require.NoError(t, f.Client.Delete(context.Background(), d))
	assert.Equal(t, "kube-system", f.LeaseNamespace(context.Background()))
}
