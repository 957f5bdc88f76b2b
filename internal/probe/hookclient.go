package probe

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"
)

// MaxResponseBytes bounds how much of an AdmissionReview answer the probe
// reads. kube-apiserver reads any length; the guard bounds it so that many
// hostile targets cannot fill its memory. An answer to a probe of one small
// object is a few kilobytes, and the bound is far above any real answer
// (the largest object etcd stores is 1.5 MiB); a longer answer is a
// bad-response.
const MaxResponseBytes = 8 << 20

// reviewVersions are the AdmissionReview versions kube-apiserver can send,
// in the order it registers them (generic.NewWebhook): the decoder built
// from them is the one kube-apiserver decodes answers with.
var reviewVersions = []schema.GroupVersion{admissionv1beta1.SchemeGroupVersion, admissionv1.SchemeGroupVersion}

// hookClients builds and keeps the REST clients the probe calls webhooks
// with. They are kube-apiserver's own: k8s.io/apiserver's webhook
// ClientManager configures TLS, the server name of a service reference,
// HTTP/1.1 for services and remote URLs, and a decoder that reads an answer
// of any Content-Type (absent, text/plain, JSON or YAML). Only the
// credentials (none: the default of a kube-apiserver without an
// admission kubeconfig) and the body bound are the guard's.
type hookClients struct {
	once    sync.Once
	cm      webhookutil.ClientManager
	codec   runtime.Codec
	initErr error

	// clients keeps one client per clientConfig (clientKey), so that a client and its connections
	// live as long as the target does: the ClientManager's LRU holds 200,
	// fewer than the guard's targets.
	clients sync.Map // string -> *rest.RESTClient
	count   atomic.Int64
}

// maxClients bounds the kept clients; they are all dropped when it is
// reached (rotated caBundles and changed URLs leave old ones behind).
const maxClients = 4096

// dialFunc opens a connection (rest.Config's Dial).
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// init builds the ClientManager once; resolve resolves service references,
// and dial opens connections.
func (h *hookClients) init(resolve resolveFunc, dial dialFunc) error {
	h.once.Do(func() {
		scheme := runtime.NewScheme()
		for _, add := range []func(*runtime.Scheme) error{admissionv1beta1.AddToScheme, admissionv1.AddToScheme} {
			if err := add(scheme); err != nil {
				h.initErr = err
				return
			}
		}
		h.codec = serializer.NewCodecFactory(scheme).LegacyCodec(reviewVersions...)
		cm, err := webhookutil.NewClientManager(reviewVersions, admissionv1beta1.AddToScheme, admissionv1.AddToScheme)
		if err != nil {
			h.initErr = err
			return
		}
		cm.SetAuthenticationInfoResolver(noCredentials{dial: dial})
		cm.SetServiceResolver(serviceResolver{resolve: resolve})
		if err := cm.Validate(); err != nil {
			h.initErr = err
			return
		}
		h.cm = cm
	})
	return h.initErr
}

// client returns the REST client for cc.
func (h *hookClients) client(cc webhookutil.ClientConfig, resolve resolveFunc, dial dialFunc) (*rest.RESTClient, error) {
	if err := h.init(resolve, dial); err != nil {
		return nil, err
	}
	cc.Name = ""
	key := clientKey(cc)
	if c, ok := h.clients.Load(key); ok {
		return c.(*rest.RESTClient), nil
	}
	c, err := h.cm.HookClient(cc)
	if err != nil {
		return nil, err
	}
	if h.count.Add(1) > maxClients {
		h.clients.Clear()
		h.count.Store(1)
	}
	actual, _ := h.clients.LoadOrStore(key, c)
	return actual.(*rest.RESTClient), nil
}

// clientKey identifies cc's client: every field of cc, NUL-separated
// (URLs, names and paths hold no NUL; the caBundle comes last). It is made
// for every probe: JSON (the ClientManager's own key) was 2.9% of the
// guard's CPU at a thousand targets, this is 0.9%.
func clientKey(cc webhookutil.ClientConfig) string {
	var b strings.Builder
	b.Grow(len(cc.URL) + len(cc.CABundle) + 64)
	b.WriteString(cc.URL)
	b.WriteByte(0)
	if svc := cc.Service; svc != nil {
		b.WriteString(svc.Namespace)
		b.WriteByte(0)
		b.WriteString(svc.Name)
		b.WriteByte(0)
		b.WriteString(svc.Path)
		b.WriteByte(0)
		b.WriteString(strconv.Itoa(int(svc.Port)))
	}
	b.WriteByte(0)
	b.Write(cc.CABundle)
	return b.String()
}

// noCredentials is the AuthenticationInfoResolver of a kube-apiserver
// without an admission kubeconfig: no client certificate and no token. The
// guard adds its response bound and drops the Warning headers of answers
// (the probe's answers are not anyone's requests). Its connections are
// dialled by dial (Prober.dial).
type noCredentials struct{ dial dialFunc }

func (n noCredentials) ClientConfigFor(string) (*rest.Config, error) { return n.baseConfig(), nil }

func (n noCredentials) ClientConfigForService(string, string, int) (*rest.Config, error) {
	return n.baseConfig(), nil
}

func (n noCredentials) baseConfig() *rest.Config {
	return &rest.Config{
		WarningHandler: rest.NoWarnings{},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			if t := innerTransport(rt); t != nil && t != http.DefaultTransport {
				// client-go built this transport for this client alone (its
				// cache key holds the Dial of each rest.Config), and no
				// request has used it yet.
				connBuffers.apply(t)
			}
			return boundedBody{rt}
		},
		Dial: n.dial,
	}
}

// connBuffers sizes the buffers of each HTTP/1.1 connection the probe keeps
// to a webhook; net/http's default is 4 KiB each way. A probe writes one
// AdmissionReview of about 1.5 KiB and reads an answer of a few hundred
// bytes, and the guard keeps a connection to every target: at 1,000 targets
// the defaults held about 9 MB of buffers, a seventh of the guard's live
// heap (BenchmarkProber_Probe_connectionBuffers). A larger message only
// takes more reads or writes. kube-apiserver keeps the defaults.
var connBuffers = bufferSizes{read: 1 << 10, write: 2 << 10}

type bufferSizes struct{ read, write int }

func (b bufferSizes) apply(t *http.Transport) {
	t.ReadBufferSize, t.WriteBufferSize = b.read, b.write
}

// innerTransport is the *http.Transport under rt's wrappers (client-go's
// transport cache wraps the ones it builds), or nil.
func innerTransport(rt http.RoundTripper) *http.Transport {
	for {
		switch w := rt.(type) {
		case *http.Transport:
			return w
		case utilnet.RoundTripperWrapper:
			rt = w.WrappedRoundTripper()
		default:
			return nil
		}
	}
}

// serviceResolver adapts the prober's Resolver to the ClientManager's: a
// service reference goes to ClusterIP:port, as kube-apiserver's default
// resolver sends it.
type serviceResolver struct{ resolve resolveFunc }

// resolveFunc resolves a service reference to host:port (Resolver.Resolve).
type resolveFunc func(ctx context.Context, namespace, name string, port int32) (string, error)

// resolveTimeout bounds one Service lookup made while dialling; the
// probe resolves the Service before it calls, so this one is answered
// from the WatchingResolver's store, without an apiserver request.
const resolveTimeout = 5 * time.Second

func (r serviceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	if r.resolve == nil {
		return nil, fmt.Errorf("no resolver for service %s/%s", namespace, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	hostPort, err := r.resolve(ctx, namespace, name, port)
	if err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		hostPort = net.JoinHostPort(hostPort, strconv.Itoa(int(port)))
	}
	return &url.URL{Scheme: "https", Host: hostPort}, nil
}

// boundedBody ends a response body after MaxResponseBytes with an error.
type boundedBody struct{ next http.RoundTripper }

func (b boundedBody) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: MaxResponseBytes}
	return resp, nil
}

// WrappedRoundTripper lets client-go's utilities (and the tests) find the
// transport under boundedBody.
func (b boundedBody) WrappedRoundTripper() http.RoundTripper { return b.next }

type limitedBody struct {
	io.ReadCloser
	left int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more tells a body of exactly the bound from a longer one.
		var one [1]byte
		n, err := l.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, badResponsef("body exceeds %d bytes", MaxResponseBytes)
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.ReadCloser.Read(p)
	l.left -= int64(n)
	return n, err
}
