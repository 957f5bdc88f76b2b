package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/config"
)

// configVolume and configKey locate the GuardConfiguration in the guard's
// Deployment (deploy/kustomize/base/deployment.yaml).
const (
	configVolume = "config"
	configKey    = "config.yaml"
	// metricsPort names the container port of the metrics server, which
	// serves GET /status too (deploy/kustomize/base/deployment.yaml).
	metricsPort = "metrics"
	// legacyStatusPort named the container port of the plain, unauthenticated
	// /status of installations before /status moved to the metrics server.
	legacyStatusPort = "status"
)

// installedConfig reads the GuardConfiguration the guard's Deployment
// mounts: its volume "config" names the ConfigMap (kustomize suffixes its
// name with a hash), whose key config.yaml is the file.
func installedConfig(ctx context.Context, c client.Reader, namespace, deployment string) (*config.Configuration, string, error) {
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: deployment}, d); err != nil {
		return nil, "", fmt.Errorf("reading the guard's Deployment %s/%s: %w", namespace, deployment, err)
	}
	name := ""
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == configVolume && v.ConfigMap != nil {
			name = v.ConfigMap.Name
		}
	}
	if name == "" {
		return nil, "", fmt.Errorf("the Deployment %s/%s has no ConfigMap volume named %q", namespace, deployment, configVolume)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cm); err != nil {
		return nil, "", fmt.Errorf("reading the installed configuration, ConfigMap %s/%s: %w", namespace, name, err)
	}
	data, ok := cm.Data[configKey]
	if !ok {
		return nil, "", fmt.Errorf("ConfigMap %s/%s has no key %s", namespace, name, configKey)
	}
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		return nil, "", fmt.Errorf("ConfigMap %s/%s key %s: %w", namespace, name, configKey, err)
	}
	return cfg, fmt.Sprintf("ConfigMap %s/%s (mounted by Deployment %s)", namespace, name, deployment), nil
}

// leaderPod returns the pod that holds the leader-election Lease. The
// holder identity is "<pod name>_<uuid>" (controller-runtime's default:
// the hostname, which is the pod name).
func leaderPod(ctx context.Context, c client.Reader, namespace, lease string) (*corev1.Pod, error) {
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: lease}, l); err != nil {
		return nil, fmt.Errorf("reading the leader's Lease %s/%s: %w", namespace, lease, err)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" {
		return nil, fmt.Errorf("no leader: Lease %s/%s has no holder", namespace, lease)
	}
	if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
		if expired := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second); time.Now().After(expired) {
			return nil, fmt.Errorf("no leader: Lease %s/%s held by %s expired %s ago", namespace, lease, holder, time.Since(expired).Round(time.Second))
		}
	}
	name, _, _ := strings.Cut(holder, "_")
	pod := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return nil, fmt.Errorf("reading the leader pod %s/%s (Lease holder %s): %w", namespace, name, holder, err)
	}
	return pod, nil
}

// proxyStatus reads the leader pod's GET /status through the apiserver's
// pods proxy, which authenticates the caller and authorizes get
// pods/proxy, then deletes the caller's credentials before it connects to
// the pod. The guard serves /status on its metrics port (HTTPS) and
// authenticates and authorizes each request itself (status_auth.go), so
// proxyStatus sends a short-lived token of the status reader
// (statusToken) in statusTokenHeader. A pod that still names a "status"
// port was installed before that: its plain /status is read as it was.
func proxyStatus(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) ([]targetStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if port := containerPort(pod, legacyStatusPort); port != 0 {
		body, err := cs.CoreV1().Pods(pod.Namespace).ProxyGet("http", pod.Name, strconv.Itoa(port), "status", nil).DoRaw(ctx)
		if err != nil {
			return nil, err
		}
		return decodeStatus(body)
	}
	port := containerPort(pod, metricsPort)
	if port == 0 {
		return nil, fmt.Errorf("the pod has no container port named %q, where the guard serves /status (is --metrics-bind-address off?)", metricsPort)
	}
	token, err := statusToken(ctx, cs, pod.Namespace)
	if err != nil {
		return nil, err
	}
	res := cs.CoreV1().RESTClient().Get().Namespace(pod.Namespace).Resource("pods").SubResource("proxy").
		Name(utilnet.JoinSchemeNamePort("https", pod.Name, strconv.Itoa(port))).Suffix(statusPath).
		SetHeader(statusTokenHeader, token).Do(ctx)
	// Error, unlike Raw, decodes the apiserver's own Status.
	if err := res.Error(); err != nil {
		if refused := refusedByGuard(err, pod.Namespace); refused != nil {
			return nil, refused
		}
		return nil, err
	}
	body, err := res.Raw()
	if err != nil {
		return nil, err
	}
	return decodeStatus(body)
}

// statusToken requests a token of the status reader, in the
// installation's namespace, for statusAudience: it lives
// statusTokenSeconds and authenticates to nothing but a guard's /status.
// The caller needs create on serviceaccounts/token for that one name (the
// Role webhook-guard-status-user).
func statusToken(ctx context.Context, cs kubernetes.Interface, namespace string) (string, error) {
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, statusReaderServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{statusAudience}, ExpirationSeconds: ptr.To[int64](statusTokenSeconds)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token of ServiceAccount %s/%s, which reads /status (bind the Role webhook-guard-status-user to yourself): %w", namespace, statusReaderServiceAccount, err)
	}
	return tr.Status.Token, nil
}

// refusedByGuard explains a 401 or 403 that the guard answered, not the
// apiserver. The apiserver's own refusals are Status objects; client-go
// turns the guard's plain-text answer into a StatusError whose cause is
// an unexpected server response. It returns nil for anything else.
func refusedByGuard(err error, namespace string) error {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return nil
	}
	status := st.Status()
	if status.Code != http.StatusUnauthorized && status.Code != http.StatusForbidden || status.Details == nil {
		return nil
	}
	for _, cause := range status.Details.Causes {
		if cause.Type != metav1.CauseTypeUnexpectedServerResponse {
			continue
		}
		reader := "system:serviceaccount:" + namespace + ":" + statusReaderServiceAccount
		if status.Code == http.StatusUnauthorized {
			return fmt.Errorf("the leader did not accept the token of %s (401 Unauthorized): %s", reader, cause.Message)
		}
		return fmt.Errorf("the leader does not let %s read /status (403 Forbidden; is the ClusterRole webhook-guard-status-reader bound to it?): %s", reader, cause.Message)
	}
	return nil
}

// containerPort returns the pod's container port of that name, or 0.
func containerPort(pod *corev1.Pod, name string) int {
	for _, ctr := range pod.Spec.Containers {
		for _, p := range ctr.Ports {
			if p.Name == name {
				return int(p.ContainerPort)
			}
		}
	}
	return 0
}

func decodeStatus(body []byte) ([]targetStatus, error) {
	var rows []targetStatus
	if err := json.Unmarshal(body, &rows); err != nil {
		return nil, errors.New("the leader's /status is not JSON: " + err.Error())
	}
	return rows, nil
}

// fileConfigAndClient validates the --config file, when one is given,
// before anything touches the cluster, then loads the kubeconfig and builds
// a client. cfg is nil without a file: the caller reads the installed one
// (installedConfig) and says what it does without it.
func fileConfigAndClient(path string, restConfig func() (*rest.Config, error)) (cfg *config.Configuration, source string, rc *rest.Config, c client.Client, err error) {
	if path != "" {
		if cfg, err = config.Load(path); err != nil {
			return nil, "", nil, nil, err
		}
		source = "file " + path
	}
	if rc, err = restConfig(); err != nil {
		return nil, "", nil, nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	if c, err = client.New(rc, client.Options{Scheme: scheme}); err != nil {
		return nil, "", nil, nil, err
	}
	return cfg, source, rc, c, nil
}
