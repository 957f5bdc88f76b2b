package harness

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildGuard compiles cmd/guard into e.Dir once and returns its path.
func (e *Env) BuildGuard() (string, error) {
	e.buildOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			e.buildErr = err
			return
		}
		out := filepath.Join(e.Dir, "guard")
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/guard")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			e.buildErr = fmt.Errorf("building cmd/guard: %w\n%s", err, b)
			return
		}
		e.guardBin = out
	})
	return e.guardBin, e.buildErr
}

// Guard is a running guard process: the real binary, started the way an
// operator would start it, with a kubeconfig that carries a real token.
type Guard struct {
	// StatusURL is its /status endpoint.
	StatusURL string
	// Name tells replicas apart in logs.
	Name string

	cmd  *exec.Cmd
	logs *syncBuffer
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
}

// StartGuard starts the guard binary.
func (e *Env) StartGuard(opts GuardOptions) (*Guard, error) {
	bin, err := e.BuildGuard()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(e.Dir, fmt.Sprintf("guard-%s-%d.yaml", opts.Name, time.Now().UnixNano()))
	if err := os.WriteFile(cfg, []byte(opts.Config), 0o600); err != nil {
		return nil, err
	}
	statusAddr, err := freeLoopbackAddr()
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
	g := &Guard{Name: opts.Name, StatusURL: "http://" + statusAddr + "/status", logs: &syncBuffer{}, done: make(chan struct{})}
	g.cmd = exec.Command(bin, args...)
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
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

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
