// Command crwebhook is a controller-runtime webhook exactly as kubebuilder
// scaffolds one ("kubebuilder create webhook --defaulting
// --programmatic-validation" on a core type): a Defaulter and a Validator
// for ConfigMaps, registered with ctrl.NewWebhookManagedBy, served by the
// manager's webhook server. The conformance tests (test/e2e/conformance)
// run it behind a real kube-apiserver and guard it with webhook-guard.
//
// Nothing in its responses is adjusted: controller-runtime's
// admission.Webhook writes AdmissionReview responses without a
// Content-Type header, and webhook-guard must judge them as
// kube-apiserver does.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// DefaultedLabel is the label the defaulter sets on every ConfigMap.
const DefaultedLabel = "conformance.webhook-guard.io/defaulted"

// ForbiddenKey is the data key the validator refuses.
const ForbiddenKey = "forbidden"

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
}

func main() {
	var host, certDir string
	var port int
	flag.StringVar(&host, "webhook-host", "127.0.0.1", "The address the webhook server binds to.")
	flag.IntVar(&port, "webhook-port", 9443, "The port the webhook server binds to.")
	flag.StringVar(&certDir, "webhook-cert-path", "", "The directory that contains the webhook certificate (tls.crt and tls.key).")
	opts := zap.Options{Development: true}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	// As kubebuilder scaffolds it: HTTP/2 off, certificates from a folder.
	disableHTTP2 := func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
	webhookServer := webhook.NewServer(webhook.Options{
		Host:     host,
		Port:     port,
		CertDir:  certDir,
		CertName: "tls.crt",
		KeyName:  "tls.key",
		TLSOpts:  []func(*tls.Config){disableHTTP2},
	})
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		WebhookServer:          webhookServer,
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}
	if err := SetupConfigMapWebhookWithManager(mgr); err != nil {
		setupLog.Error(err, "unable to create webhook", "webhook", "ConfigMap")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	setupLog.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}

// log is for logging in this package.
var configmaplog = ctrl.Log.WithName("configmap-resource")

// SetupConfigMapWebhookWithManager registers the webhook for ConfigMap in the manager.
func SetupConfigMapWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &corev1.ConfigMap{}).
		WithValidator(&ConfigMapCustomValidator{}).
		WithDefaulter(&ConfigMapCustomDefaulter{}).
		Complete()
}

// +kubebuilder:webhook:path=/mutate--v1-configmap,mutating=true,failurePolicy=fail,sideEffects=None,groups="",resources=configmaps,verbs=create;update,versions=v1,name=mconfigmap-v1.kb.io,admissionReviewVersions=v1

// ConfigMapCustomDefaulter sets default values on ConfigMaps when they are
// created or updated.
type ConfigMapCustomDefaulter struct{}

var _ admission.Defaulter[*corev1.ConfigMap] = &ConfigMapCustomDefaulter{}

// Default implements admission.Defaulter.
func (d *ConfigMapCustomDefaulter) Default(_ context.Context, obj *corev1.ConfigMap) error {
	configmaplog.V(1).Info("Defaulting for ConfigMap", "name", obj.GetName())
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	obj.Labels[DefaultedLabel] = "true"
	return nil
}

// +kubebuilder:webhook:path=/validate--v1-configmap,mutating=false,failurePolicy=fail,sideEffects=None,groups="",resources=configmaps,verbs=create;update,versions=v1,name=vconfigmap-v1.kb.io,admissionReviewVersions=v1

// ConfigMapCustomValidator validates ConfigMaps when they are created,
// updated or deleted.
type ConfigMapCustomValidator struct{}

var _ admission.Validator[*corev1.ConfigMap] = &ConfigMapCustomValidator{}

// ValidateCreate implements admission.Validator.
func (v *ConfigMapCustomValidator) ValidateCreate(_ context.Context, obj *corev1.ConfigMap) (admission.Warnings, error) {
	configmaplog.V(1).Info("Validation for ConfigMap upon creation", "name", obj.GetName())
	return nil, validate(obj)
}

// ValidateUpdate implements admission.Validator.
func (v *ConfigMapCustomValidator) ValidateUpdate(_ context.Context, _, newObj *corev1.ConfigMap) (admission.Warnings, error) {
	configmaplog.V(1).Info("Validation for ConfigMap upon update", "name", newObj.GetName())
	return nil, validate(newObj)
}

// ValidateDelete implements admission.Validator.
func (v *ConfigMapCustomValidator) ValidateDelete(_ context.Context, obj *corev1.ConfigMap) (admission.Warnings, error) {
	configmaplog.V(1).Info("Validation for ConfigMap upon deletion", "name", obj.GetName())
	return nil, nil
}

func validate(obj *corev1.ConfigMap) error {
	if _, ok := obj.Data[ForbiddenKey]; ok {
		return fmt.Errorf("configmap %q: data key %q is not allowed", obj.Name, ForbiddenKey)
	}
	return nil
}
