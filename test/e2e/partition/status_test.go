package partition

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statusJSON is "guard status -o json", as an operator's script reads it.
type statusJSON struct {
	Namespace    string `json:"namespace"`
	ConfigSource string `json:"configSource"`
	Lease        string `json:"lease"`
	Leader       string `json:"leader"`
	Targets      []struct {
		Kind          string  `json:"kind"`
		Configuration string  `json:"configuration"`
		Webhook       string  `json:"webhook"`
		State         string  `json:"state"`
		Mode          string  `json:"mode"`
		Successes     int     `json:"consecutiveSuccesses"`
		Failures      int     `json:"consecutiveFailures"`
		LastResult    string  `json:"lastResult"`
		LastProbe     string  `json:"lastProbe"`
		APIServerLast string  `json:"apiserverLastResult"`
		Admitted      float64 `json:"admittedWithoutWebhook"`
	} `json:"targets"`
	Unavailable []string `json:"unavailable"`
}

// runStatus runs "guard status" with the admin's kubeconfig and nothing
// else: no configuration file, no port-forward.
func runStatus(t *testing.T, ns string, args ...string) (stdout, stderr string) {
	t.Helper()
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"status", "--kubeconfig", env.KubeconfigPath, "--namespace", ns}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "guard status: %s", errb.String())
	return out.String(), errb.String()
}

// The installation as kustomize lays it out, without a kubelet: the
// Deployment that mounts the hashed ConfigMap, and a Pod object for the
// leader (named as the guard's hostname, which is what a pod's hostname
// is) whose IP the apiserver's pods proxy dials. The CONNECT proxy routes
// that IP to the real guard process's status port on loopback.
func TestStatus_withAKubeconfigAloneReadsTheInstallationAndTheLeaderThroughTheApiserver(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	cfg := w.config(true, time.Second)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "webhook-guard-config-7h2k9fd8m4"}, Data: map[string]string{"config.yaml": cfg}}
	require.NoError(t, env.Client.Create(ctx, cm))
	labels := map[string]string{"app.kubernetes.io/name": "webhook-guard"}
	podSpec := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "manager", Image: "webhook-guard:latest", Ports: []corev1.ContainerPort{{Name: "status", ContainerPort: 8082}}}},
		Volumes:    []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}},
	}
	require.NoError(t, env.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "webhook-guard"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec}},
	}))

	g := w.startGuard("leader", true, time.Second, "--leader-elect", "--leader-election-namespace", w.ns,
		"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms")
	hostname, err := os.Hostname()
	require.NoError(t, err)
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: hostname, Labels: labels}, Spec: podSpec}
	require.NoError(t, env.Client.Create(ctx, pod))
	podIP := "10.250.0." + strings.TrimPrefix(w.ns, "partition-")
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))
	u, err := url.Parse(g.StatusURL)
	require.NoError(t, err)
	proxy.Route(net.JoinHostPort(podIP, "8082"), u.Host)
	waitHealthyProbes(t, g, 3)
	require.Eventually(t, func() bool {
		l := &coordinationv1.Lease{}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "webhook-guard.webhook-guard.io"}, l) == nil &&
			l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, hostname+"_")
	}, transition, 50*time.Millisecond, "the guard never took the Lease")

	out, stderr := runStatus(t, w.ns, "-o", "json")
	var rep statusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Empty(t, rep.Unavailable, stderr)
	assert.Equal(t, w.ns, rep.Namespace)
	assert.Equal(t, "ConfigMap "+w.ns+"/"+cm.Name+" (mounted by Deployment webhook-guard)", rep.ConfigSource)
	assert.Equal(t, w.ns+"/webhook-guard.webhook-guard.io", rep.Lease)
	assert.Equal(t, hostname, rep.Leader)
	require.Len(t, rep.Targets, 1)
	row := rep.Targets[0]
	assert.Equal(t, "Mutating", row.Kind)
	assert.Equal(t, w.name, row.Configuration)
	assert.Equal(t, w.hook, row.Webhook)
	assert.Equal(t, "Closed", row.State)
	assert.Equal(t, "Bypass", row.Mode)
	assert.GreaterOrEqual(t, row.Successes, 3, "the leader's counts, read through the apiserver")
	assert.Zero(t, row.Failures)
	assert.True(t, strings.HasPrefix(row.LastResult, "Healthy ("), row.LastResult)
	_, err = time.Parse(time.RFC3339, row.LastProbe)
	assert.NoError(t, err, "lastProbe is RFC 3339: %q", row.LastProbe)
	assert.NotEmpty(t, row.APIServerLast)

	table, _ := runStatus(t, w.ns)
	t.Logf("$ guard status --namespace %s\n%s", w.ns, table)
	assert.Contains(t, table, "Leader: "+hostname+" (Lease "+w.ns+"/webhook-guard.webhook-guard.io)")
	assert.Contains(t, table, "Configuration: ConfigMap "+w.ns+"/"+cm.Name)
	assert.Contains(t, table, "Marking: the apiserver does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy", "this package's apiserver does not serve it")

	// The leader is gone: the objects still tell the state, and the
	// output names what it could not read.
	g.Stop()
	out, stderr = runStatus(t, w.ns, "-o", "json")
	rep = statusJSON{}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Unavailable, 1, stderr)
	assert.Contains(t, rep.Unavailable[0], "probe counts: no leader: Lease "+w.ns+"/webhook-guard.webhook-guard.io has no holder")
	assert.Equal(t, "Closed", rep.Targets[0].State)
	assert.Zero(t, rep.Targets[0].Successes)
	table, stderr = runStatus(t, w.ns)
	assert.Contains(t, table, w.hook)
	assert.Contains(t, stderr, "unavailable: probe counts: no leader")
}
