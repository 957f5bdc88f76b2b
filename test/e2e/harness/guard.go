package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// BuildGuard compiles cmd/guard into e.Dir once and returns its path.
func (e *Env) BuildGuard() (string, error) {
	e.buildOnce.Do(func() { e.guardBin, e.buildErr = e.build("guard") })
	return e.guardBin, e.buildErr
}

// buildFailpointGuard builds cmd/guard with -tags failpoints, once.
func (e *Env) buildFailpointGuard() (string, error) {
	e.failpointOnce.Do(func() { e.failpointBin, e.failpointErr = e.build("guard-failpoints", "-tags", "failpoints") })
	return e.failpointBin, e.failpointErr
}

// build compiles cmd/guard into e.Dir/name with extra go build flags.
func (e *Env) build(name string, flags ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(e.Dir, name)
	cmd := exec.Command("go", append(append([]string{"build", "-trimpath"}, flags...), "-o", out, "./cmd/guard")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/guard %v: %w\n%s", flags, err, b)
	}
	return out, nil
}

// Guard is a running guard process: the real binary, started the way an
// operator would start it, with a kubeconfig that carries a real token.
type Guard struct {
	// StatusURL is its /status endpoint.
	StatusURL string
	// Name tells replicas apart in logs.
	Name string

	cmd  *exec.Cmd
	logs *SyncBuffer
	done chan struct{}
}

// GuardOptions start a Guard.
type GuardOptions struct {
	// Name tells replicas apart in logs.
	Name string
	// Kubeconfig authenticates the process (an Identity's KubeconfigPath).
	Kubeconfig string
	// Config is the GuardConfiguration YAML.
	Config string
	// Args are extra flags, e.g. --leader-elect.
	Args []string
	// WithoutMarking skips installing the marking policies that "guard
	// manifests marking" renders for Config (InstallMarking).
	WithoutMarking bool
	// WithoutPolicy skips installing the guard policy that "guard
	// manifests policy" renders for Config and the identity of Kubeconfig
	// (InstallPolicy), as a test of a missing policy needs.
	WithoutPolicy bool
	// Failpoints, when set, runs a guard built with -tags failpoints and
	// WEBHOOK_GUARD_FAILPOINTS set to it ("before-write=0.5,..." for
	// SIGKILLs, "before-write=sleep:3s" for a pause the first time).
	Failpoints string
}

// StartGuard starts the guard binary.
func (e *Env) StartGuard(opts GuardOptions) (*Guard, error) {
	bin, err := e.BuildGuard()
	if opts.Failpoints != "" {
		bin, err = e.buildFailpointGuard()
	}
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(e.Dir, fmt.Sprintf("guard-%s-%d.yaml", opts.Name, time.Now().UnixNano()))
	if err := os.WriteFile(cfg, []byte(opts.Config), 0o600); err != nil {
		return nil, err
	}
	if !opts.WithoutMarking {
		if err := e.InstallMarking(context.Background(), bin, cfg); err != nil {
			return nil, err
		}
	}
	if username, ok := e.usernames.Load(opts.Kubeconfig); ok && !opts.WithoutPolicy {
		if err := e.InstallPolicy(context.Background(), bin, cfg, username.(string)); err != nil {
			return nil, err
		}
	}
	statusAddr, err := FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"run",
		"--kubeconfig", opts.Kubeconfig,
		"--config", cfg,
		"--health-probe-bind-address", "0",
		"--status-bind-address", statusAddr,
		"--zap-log-level", "debug",
	}, opts.Args...)
	g := &Guard{Name: opts.Name, StatusURL: "http://" + statusAddr + "/status", logs: &SyncBuffer{}, done: make(chan struct{})}
	g.cmd = exec.Command(bin, args...)
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	if opts.Failpoints != "" {
		g.cmd.Env = append(os.Environ(), "WEBHOOK_GUARD_FAILPOINTS="+opts.Failpoints)
	}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting guard: %w", err)
	}
	go func() {
		_ = g.cmd.Wait()
		close(g.done)
	}()
	return g, nil
}

// Kill sends SIGKILL: no cleanup, no Lease release, exactly a crash.
func (g *Guard) Kill() {
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.done
}

// Signal sends sig to the process, for example SIGSTOP and SIGCONT to
// pause it as an exhausted CPU quota (cgroup throttling) would.
func (g *Guard) Signal(sig syscall.Signal) error { return g.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits for a graceful exit.
func (g *Guard) Stop() {
	select {
	case <-g.done:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		g.Kill()
	}
}

// Exited reports whether the process has ended, and its exit code.
func (g *Guard) Exited() (bool, int) {
	select {
	case <-g.done:
		return true, g.cmd.ProcessState.ExitCode()
	default:
		return false, 0
	}
}

// Wait waits for the process to end and returns its exit code.
func (g *Guard) Wait(timeout time.Duration) (int, error) {
	select {
	case <-g.done:
		return g.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("guard %s still running after %s", g.Name, timeout)
	}
}

// Logs returns everything the process printed so far.
func (g *Guard) Logs() string { return g.logs.String() }

// CountLogLines counts the log lines that contain s.
func (g *Guard) CountLogLines(s string) int {
	return strings.Count(g.Logs(), s)
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a process's
// output, written by its pipes and read by the test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeLoopbackAddr returns a loopback address whose port is free now, for
// a process the test starts to listen on. The port lies below the
// kernel's ephemeral range (ip_local_port_range), from which every
// outgoing connection on the machine takes its local port: a port the
// kernel chose for a listener on ":0" and that is then released can be
// taken by such a connection before the process binds it (a guard failed
// to start that way, "address already in use"). A port is handed out once
// per test process.
func FreeLoopbackAddr() (string, error) {
	freePorts.Lock()
	defer freePorts.Unlock()
	lo, hi := portsBelowEphemeral()
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		if freePorts.given[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			return "", err
		}
		freePorts.given[port] = true
		return addr, nil
	}
	return "", fmt.Errorf("no free loopback port in [%d, %d) after 1,000 tries", lo, hi)
}

var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// portsBelowEphemeral is the range FreeLoopbackAddr picks from: from 10000
// up to the start of the kernel's ephemeral range (32768 by default on
// Linux).
func portsBelowEphemeral() (lo, hi int) {
	lo, hi = 10000, 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if start, err := strconv.Atoi(f[0]); err == nil && start > lo+1000 {
				hi = start
			}
		}
	}
	return lo, hi
}

// GuardRules are the permissions the installed RBAC gives the guard
// cluster-wide, for the given target configuration names, by a short name
// per rule. The path probe's grant depends on the targets' Services, not
// their names, and is a Role in each Service's namespace: PathProbeRule
// renders its rule, and GrantPathProbe grants it.
func GuardRules(names []string) map[string]rbacv1.PolicyRule {
	rules := map[string]rbacv1.PolicyRule{
		"read-marks":          {APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingadmissionpolicies", "mutatingadmissionpolicybindings"}, Verbs: []string{"get", "list", "watch"}},
		"read-configurations": {APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}, Verbs: []string{"get", "list", "watch"}},
		"write-targets":       {APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}, Verbs: []string{"patch"}, ResourceNames: names},
		"read-policy":         {APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"}, Verbs: []string{"get", "list", "watch"}},
		"selfsubjectreviews":  {APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}, Verbs: []string{"create"}},
		"selfsubjectaccess":   {APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews"}, Verbs: []string{"create"}},
		"events":              {APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		"leader-events":       {APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		"metrics-auth":        {APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		"metrics-authz":       {APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		"certificates":        {APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificates"}, Verbs: []string{"get"}},
		"services":            {APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
		"apiserver-metrics":   {NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
		"leases":              {APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		"replicasets":         {APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"list"}},
		"deployments":         {APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}, ResourceNames: []string{"webhook-guard"}},
	}
	return rules
}

// InstallMarking installs what "guard manifests marking --config
// configPath" renders, as an administrator installs it with everything
// else: the marking policies of the configuration's mutating targets.
// Those already installed are left alone. A configuration that does not
// load installs nothing: the guard refuses it anyway.
func (e *Env) InstallMarking(ctx context.Context, bin, configPath string) error {
	out, err := exec.CommandContext(ctx, bin, "manifests", "marking", "--config", configPath).Output()
	if err != nil {
		return nil
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading guard manifests marking: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := e.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("installing %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// InstallPolicy applies what "guard manifests policy --config configPath
// --breaker breaker" renders, as an administrator applies it with
// everything else (the guard itself only reads it): the guard policy and
// binding, replacing those of an earlier test's guard of the same policy
// name. A configuration that does not load installs nothing: the guard
// refuses it anyway.
func (e *Env) InstallPolicy(ctx context.Context, bin, configPath, breaker string) error {
	out, err := exec.CommandContext(ctx, bin, "manifests", "policy", "--config", configPath, "--breaker", breaker).Output()
	if err != nil {
		return nil
	}
	return e.ApplyManifests(ctx, out)
}

// ApplyManifests puts every object of a YAML or JSON stream in place as an
// administrator: created, or replaced whole (an update), so that what
// anyone else changed on it is gone, as after a helm upgrade.
func (e *Env) ApplyManifests(ctx context.Context, manifests []byte) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading manifests: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		// kube-apiserver writes a policy's status (its type checking)
		// after each change, so an update can meet a newer version.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(obj.GroupVersionKind())
			err := e.Client.Get(ctx, client.ObjectKeyFromObject(obj), live)
			switch {
			case apierrors.IsNotFound(err):
				return e.Client.Create(ctx, obj.DeepCopy())
			case err != nil:
				return err
			}
			update := obj.DeepCopy()
			update.SetResourceVersion(live.GetResourceVersion())
			return e.Client.Update(ctx, update)
		})
		if err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// GrantGuard binds GuardRules (minus the rules named in without)
// to the identity's ServiceAccount in namespace, and waits until RBAC lets
// it read MutatingWebhookConfigurations.
func (e *Env) GrantGuard(ctx context.Context, namespace string, id *Identity, names []string, without ...string) error {
	rules := GuardRules(names)
	var kept []rbacv1.PolicyRule
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		if !slices.Contains(without, name) {
			kept = append(kept, rules[name])
		}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "guard-" + namespace}, Rules: kept}
	if err := e.Client.Create(ctx, role); err != nil {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	sa := id.Username[strings.LastIndex(id.Username, ":")+1:]
	if err := e.Bind(ctx, role.Name, role.Name, namespace, sa); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := id.Client.List(ctx, &admissionregistrationv1.MutatingWebhookConfigurationList{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("RBAC for %s never took effect: %w", id.Username, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pid is the guard process's ID, for measuring it (CPU, memory) or
// putting it in a cgroup.
func (g *Guard) Pid() int { return g.cmd.Process.Pid }

// T is what StartGuardT needs of a test (a *testing.T).
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	Failed() bool
}

// StartGuardT starts the guard as StartGuard does, failing t if it
// cannot, and stops it when t ends, logging its output if t failed.
func (e *Env) StartGuardT(t T, opts GuardOptions) *Guard {
	t.Helper()
	g, err := e.StartGuard(opts)
	if err != nil {
		t.Fatalf("starting the guard: %v", err)
	}
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("guard logs:\n%s", g.Logs())
		}
	})
	return g
}
