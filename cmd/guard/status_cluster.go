package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/config"
)

// configVolume and configKey locate the GuardConfiguration in the guard's
// Deployment (deploy/kustomize/base/deployment.yaml).
const (
	configVolume = "config"
	configKey    = "config.yaml"
	// statusPort names the container port of GET /status.
	statusPort = "status"
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
		return nil, "", fmt.Errorf("Deployment %s/%s has no ConfigMap volume named %q", namespace, deployment, configVolume)
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

// proxyStatus reads the pod's GET /status through the apiserver's pods
// proxy, which authenticates the caller and authorizes get pods/proxy.
func proxyStatus(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) ([]targetStatus, error) {
	port := 0
	for _, ctr := range pod.Spec.Containers {
		for _, p := range ctr.Ports {
			if p.Name == statusPort {
				port = int(p.ContainerPort)
			}
		}
	}
	if port == 0 {
		return nil, fmt.Errorf("the pod has no container port named %q (installed before guard status read it through the apiserver?)", statusPort)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := cs.CoreV1().Pods(pod.Namespace).ProxyGet("http", pod.Name, strconv.Itoa(port), "status", nil).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
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
