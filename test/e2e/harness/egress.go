package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// ConnectProxy is an HTTP CONNECT proxy on a Unix socket: the stand-in for
// konnectivity that kube-apiserver's egress selector sends its "cluster"
// traffic (every service-backed webhook call) through. A test cuts a
// route to make the apiserver's calls hang, as when the control plane
// loses its path to the nodes, while the webhook itself stays healthy
// and directly reachable.
type ConnectProxy struct {
	// SocketPath is the Unix socket the apiserver dials.
	SocketPath string

	listener net.Listener
	mu       sync.Mutex
	cut      map[string]bool
	routes   map[string]string
	// open holds the established tunnels by the address they were asked
	// for, so that a cut ends them too.
	open map[string]map[net.Conn]bool
	// heal is closed when the cut of an address heals, to release the
	// CONNECTs held on it at once.
	heal map[string]chan struct{}
	// tunnels counts CONNECTs forwarded; held counts those held on a cut
	// route.
	tunnels, held atomic.Int64
	done          chan struct{}
}

// StartConnectProxy listens on a new socket in a short temporary folder
// (Unix socket paths are limited to about 100 bytes).
func StartConnectProxy() (*ConnectProxy, error) {
	dir, err := os.MkdirTemp("/tmp", "wg-egress-")
	if err != nil {
		return nil, err
	}
	p := &ConnectProxy{SocketPath: filepath.Join(dir, "proxy.sock"), cut: map[string]bool{}, routes: map[string]string{}, open: map[string]map[net.Conn]bool{}, heal: map[string]chan struct{}{}, done: make(chan struct{})}
	if p.listener, err = net.Listen("unix", p.SocketPath); err != nil {
		return nil, fmt.Errorf("listening on %s: %w", p.SocketPath, err)
	}
	go p.serve()
	return p, nil
}

// EgressSelectorConfiguration returns the apiserver's
// --egress-selector-config-file content: "cluster" traffic goes through
// this proxy with HTTPConnect over UDS, as konnectivity is deployed. (The
// transport.tcp form with an http:// URL passes validation but crashes
// kube-apiserver v1.37.2 at start.)
func (p *ConnectProxy) EgressSelectorConfiguration() []byte {
	return fmt.Appendf(nil, `apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, p.SocketPath)
}

// Cut makes CONNECTs to addr (host:port) hang until the route heals or
// the caller gives up: the apiserver sees "context deadline exceeded".
// Tunnels to addr already established end, as when the agent that
// carried them loses the node: a kept-alive connection does not outlive
// the road.
func (p *ConnectProxy) Cut(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut[addr] {
		p.heal[addr] = make(chan struct{})
	}
	p.cut[addr] = true
	for c := range p.open[addr] {
		_ = c.Close()
	}
	delete(p.open, addr)
}

// track records c as a tunnel to addr until the returned func is called,
// and reports false (recording nothing) when addr was cut meanwhile.
func (p *ConnectProxy) track(addr string, c net.Conn) (func(), bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut[addr] {
		return nil, false
	}
	if p.open[addr] == nil {
		p.open[addr] = map[net.Conn]bool{}
	}
	p.open[addr][c] = true
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.open[addr], c)
	}, true
}

// Route sends CONNECTs to from (host:port, for example a pod IP that the
// apiserver's pods proxy dials) to the loopback address to, where the
// process stands in for the pod. Every connection stays on loopback.
func (p *ConnectProxy) Route(from, to string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[from] = to
}

func (p *ConnectProxy) route(addr string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if to, ok := p.routes[addr]; ok {
		return to
	}
	return addr
}

// Heal forwards CONNECTs to addr again.
func (p *ConnectProxy) Heal(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.cut, addr)
	if ch, ok := p.heal[addr]; ok {
		close(ch)
		delete(p.heal, addr)
	}
}

// healed returns a channel closed when addr's cut heals (an already closed
// one when it is not cut).
func (p *ConnectProxy) healed(addr string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.heal[addr]; ok {
		return ch
	}
	ch := make(chan struct{})
	close(ch)
	return ch
}

func (p *ConnectProxy) isCut(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut[addr]
}

// Tunnels returns how many CONNECTs were forwarded and how many were held
// on a cut route.
func (p *ConnectProxy) Tunnels() (forwarded, held int64) { return p.tunnels.Load(), p.held.Load() }

// Close stops the proxy and ends every tunnel.
func (p *ConnectProxy) Close() {
	close(p.done)
	_ = p.listener.Close()
	_ = os.RemoveAll(filepath.Dir(p.SocketPath))
}

func (p *ConnectProxy) serve() {
	for {
		c, err := p.listener.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *ConnectProxy) handle(c net.Conn) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	target := p.route(req.Host)
	host, _, err := net.SplitHostPort(target)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		// Only loopback targets exist in these tests.
		_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\n\r\n")
		return
	}
	if p.isCut(req.Host) {
		p.held.Add(1)
		// Hold the CONNECT unanswered, like a tunnel whose agent cannot
		// reach the node, until the caller gives up or the route heals.
		for p.isCut(req.Host) {
			// Released at once by the heal; whether the caller gave up is
			// looked at now and then, so that thousands of held CONNECTs
			// cost little.
			select {
			case <-p.done:
				return
			case <-p.healed(req.Host):
				continue
			case <-time.After(500 * time.Millisecond):
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := br.Peek(1); err != nil && !isTimeout(err) {
				return // the caller gave up
			}
		}
		_ = c.SetReadDeadline(time.Time{})
	}
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer func() { _ = up.Close() }()
	untrack, ok := p.track(req.Host, up)
	if !ok {
		return // cut while dialing
	}
	defer untrack()
	p.tunnels.Add(1)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	go func() {
		_, _ = io.Copy(up, br)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	go func() {
		<-p.done
		_ = up.Close()
		_ = c.Close()
	}()
	_, _ = io.Copy(c, up)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
