package partition

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// What kube-apiserver v1.37.2 does with a GET on
// /api/v1/namespaces/{ns}/services/https:{name}:{port}/proxy/{path}, from
// its source (k8s.io/kubernetes@v1.37.2 unless said otherwise):
//
//   - Where it goes: pkg/registry/core/service/proxy.go ProxyREST.Connect
//     asks pkg/registry/core/service/storage/storage.go REST.ResourceLocation.
//     That maps the port number to the Service port's name, reads the
//     Service's EndpointSlices (the apiserver's informer-backed
//     k8s.io/apiserver@v0.37.2/pkg/util/proxy NewEndpointSliceIndexerGetter,
//     built in cmd/kube-apiserver/app/server.go; Endpoints are never read),
//     and picks one with proxy.RandomEndpoint: a slice port of that name,
//     an endpoint not marked unready, and (isValidAddress) a targetRef to a
//     Pod in the same namespace whose status.podIPs holds addresses[0]. No
//     such endpoint: 503 "no endpoints available for service". The
//     ClusterIP is never used: the service proxy dials a pod IP and the
//     EndpointSlice's port (the target port).
//   - How it dials: the transport is the one of every "proxy" subresource
//     (pkg/controlplane/apiserver/config.go CreateProxyTransport, handed to
//     pods, nodes and services in pkg/registry/core/rest/storage_core.go
//     and pkg/controlplane/instance.go). With an egress selector,
//     cmd/kube-apiserver/app/server.go (CreateKubeAPIServerConfig, "Use the
//     config.ControlPlane.Generic.EgressSelector lookup as the transport
//     used by the "proxy" subresources") clones it with DialContext set to
//     egressselector.Cluster's dialer. A service-backed webhook's client
//     gets the same Lookup(egressselector.Cluster) dialer in
//     k8s.io/apiserver@v0.37.2/pkg/util/webhook/authentication.go
//     NewDefaultAuthenticationInfoResolverWrapper (ClientConfigForServiceFunc),
//     or that very proxy transport's DialContext when there is no egress
//     selector. So both go through the same "cluster" egress; but the
//     webhook call's destination is the ClusterIP:port
//     (aggregatorapiserver.NewClusterIPServiceResolver ->
//     proxy.ResolveCluster, chosen in server.go buildServiceResolver unless
//     --enable-aggregator-routing), the service proxy's a pod IP:targetPort.
//     Same road, different last hop.
//   - How it fails: the proxy handler (k8s.io/apimachinery@v0.37.2
//     pkg/util/proxy/upgradeaware.go, wrapped by transport.go) answers a
//     transport error with 503 ServiceUnavailable "error trying to reach
//     service: <dial error>"; a CONNECT refused by the egress proxy is
//     k8s.io/apiserver@v0.37.2/pkg/server/egressselector/egress_selector.go
//     tunnelHTTPConnect's "proxy error from <proxy> while dialing <addr>,
//     code <n>". But a CONNECT the egress leaves unanswered is not an
//     error: tunnelHTTPConnect reads the answer without a deadline and
//     ignores the context, the egress dialer has no timeout (it replaces
//     SetTransportDefaults' 30 s dialer), and "proxy" is a long-running
//     subresource (pkg/controlplane/apiserver/config.go BuildGenericConfig,
//     LongRunningFunc), so no request timeout applies. The GET hangs, with
//     no answer from the apiserver, until the client gives up (seen once
//     for 75 s, past the default 60 s --request-timeout); and if the road
//     heals first, the same GET completes with the backend's answer. A
//     probe must bring its own deadline and read "no answer" as the broken
//     road.
//   - Connections: the proxy transport pools keep-alive connections, and a
//     dial the client gave up on still completes once the road is back, into
//     the pool. Here the webhook server closes every connection after one
//     request, so that every request is a CONNECT of its own, and no address
//     is cut again once healed.

// probePath is what the service proxy GETs on the webhook server; a GET
// there answers 200 "ok" and nothing else calls it.
const probePath = "/probe"

// serviceProxyHang is how long a GET waits for an apiserver that does not
// answer.
const serviceProxyHang = 2 * time.Second

// The service proxy and the service-backed webhook call both travel the
// apiserver's "cluster" egress: cut the road and both fail, heal it and
// both work. They dial different addresses through it (pod IP vs
// ClusterIP), so a cut of one destination alone breaks only one of them.
func TestFact_serviceProxyTravelsTheClusterEgress(t *testing.T) {
	start := time.Now()
	w := newWorld(t)
	w.wh.SetBehaviour(probePath, harness.Allow())
	w.wh.SetKeepAlivesEnabled(false)
	clusterIP := w.addr // what the webhook call dials through the proxy

	// The Service has a ClusterIP but no EndpointSlice: the service proxy
	// has nowhere to go, although the webhook call does (the ClusterIP).
	_, err := w.serviceProxyGet(serviceProxyHang)
	requireAPIServerStatus(t, err, http.StatusServiceUnavailable, `no endpoints available for service "hook"`)

	podAddr := w.serviceProxyBackend()

	// (1) The road is healthy: the service proxy reaches the webhook server
	// through a tunnel of the CONNECT proxy, to the pod's address, and so
	// does the webhook call (to the ClusterIP).
	require.Eventually(t, func() bool {
		body, err := w.serviceProxyGet(serviceProxyHang)
		return err == nil && body == "ok"
	}, 10*time.Second, 50*time.Millisecond, "the service proxy never reached the webhook (the apiserver's EndpointSlice informer, or the route)")
	tunnels, _ := proxy.Tunnels()
	probes := w.wh.Calls(probePath)
	body, err := w.serviceProxyGet(serviceProxyHang)
	require.NoError(t, err)
	assert.Equal(t, "ok", body, "the webhook server's own answer, relayed")
	assert.Equal(t, probes+1, w.wh.Calls(probePath), "the GET reached the webhook server")
	after, _ := proxy.Tunnels()
	assert.Greater(t, after, tunnels, "the GET came through the CONNECT proxy: the cluster egress")
	require.Eventually(t, func() bool {
		calls := w.wh.APIServerCalls(path)
		return w.createConfigMap("healthy-") == nil && w.wh.APIServerCalls(path) > calls
	}, 10*time.Second, 50*time.Millisecond, "the apiserver never called the webhook")

	// The egress answers but cannot reach the pod (the tunnel's far end
	// refuses): the apiserver's own 503 Status, which a relayed answer of
	// the webhook server is not.
	deadAddr, err := harness.FreeLoopbackAddr() // nothing listens there
	require.NoError(t, err)
	proxy.Route(podAddr, deadAddr)
	probes = w.wh.Calls(probePath)
	_, err = w.serviceProxyGet(serviceProxyHang)
	requireAPIServerStatus(t, err, http.StatusServiceUnavailable,
		"error trying to reach service: proxy error from "+proxy.SocketPath+" while dialing "+podAddr+", code 502")
	assert.Equal(t, probes, w.wh.Calls(probePath))
	proxy.Route(podAddr, w.wh.Addr())

	// Only the pod's address is cut: the service proxy hangs, the webhook
	// call (to the ClusterIP) still works.
	proxy.Cut(podAddr)
	w.requireServiceProxyHangs(podAddr)
	w.requireWebhookCalled()

	// (2, 3) The road is cut, for both destinations: the service proxy GET
	// and the apiserver's webhook call both fail, in the same cut.
	proxy.Cut(clusterIP)
	w.requireWebhookCallFails()
	w.requireServiceProxyHangs(podAddr)

	// The pod's address heals while a GET waits: that GET completes, late,
	// with the webhook server's answer. Only the ClusterIP is cut now: the
	// service proxy works, the webhook call does not.
	w.requireServiceProxyCompletesOnHeal(podAddr)
	w.requireServiceProxyWorks()
	w.requireWebhookCallFails()

	// (4) Healed: both work again.
	proxy.Heal(clusterIP)
	w.requireServiceProxyWorks()
	w.requireWebhookCalled()
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// serviceProxyGet GETs probePath on the webhook through the apiserver's
// service proxy, as the guard would: https:hook:<port>, the Service's port
// number.
func (w *world) serviceProxyGet(timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Result.Error decodes the apiserver's Status (in the negotiated
	// encoding, protobuf here); DoRaw and Result.Raw leave it as "the
	// server is currently unable to handle the request".
	res := env.Clientset.CoreV1().Services(w.ns).
		ProxyGet("https", "hook", strconv.Itoa(int(w.wh.Port())), probePath, nil).(*rest.Request).Do(ctx)
	if err := res.Error(); err != nil {
		return "", err
	}
	b, err := res.Raw()
	return string(b), err
}

// serviceProxyBackend puts a pod behind the world's Service, as the
// service proxy needs: a Pod whose status holds an address nothing dials
// but the CONNECT proxy, which routes it to the webhook on loopback (the
// API rejects loopback endpoint addresses; this one only ever names a
// route), and an EndpointSlice for the Service naming that Pod, on a
// target port unlike the Service's. It returns the pod's address, the
// CONNECT target of the service proxy.
func (w *world) serviceProxyBackend() string {
	w.t.Helper()
	ctx := context.Background()
	podIP := "10.255.0." + strings.TrimPrefix(w.ns, "partition-")
	const targetPort = 8443
	podAddr := net.JoinHostPort(podIP, strconv.Itoa(targetPort))
	proxy.Route(podAddr, w.wh.Addr())
	w.t.Cleanup(func() { proxy.Heal(podAddr) })
	pod := w.podBehindService(podIP)
	require.NoError(w.t, env.Client.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: w.ns, Name: "hook-x1", Labels: map[string]string{discoveryv1.LabelServiceName: "hook"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{podIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: w.ns, Name: pod.Name, UID: pod.UID},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](targetPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}))
	return podAddr
}

func (w *world) createConfigMap(prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := env.Clientset.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	return err
}

// podBehindService creates a Pod in the world's namespace whose status
// holds podIP: the service proxy only dials endpoints that name such a
// Pod. There is no kubelet; the status is written as one would.
func (w *world) podBehindService(podIP string) *corev1.Pod {
	w.t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(w.t, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "hook-0"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "webhook", Image: "webhook:latest", Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}}}}},
	}
	require.NoError(w.t, env.Client.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}}}
	require.NoError(w.t, env.Client.Status().Update(ctx, pod))
	return pod
}

// requireAPIServerStatus requires err to be the apiserver's own Status
// with code and a message containing msg.
func requireAPIServerStatus(t *testing.T, err error, code int32, msg string) {
	t.Helper()
	require.Error(t, err)
	var st apierrors.APIStatus
	require.True(t, errors.As(err, &st), "not a Status from the apiserver: %v", err)
	assert.Equal(t, code, st.Status().Code, "%v", err)
	assert.Contains(t, st.Status().Message, msg)
}

// requireServiceProxyHangs requires a service proxy GET to get no answer at
// all from the apiserver while it holds a CONNECT to addr in the egress
// proxy; the GET ends only because the client gives up.
func (w *world) requireServiceProxyHangs(addr string) {
	w.t.Helper()
	_, held := proxy.Tunnels()
	probes := w.wh.Calls(probePath)
	begin := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := w.serviceProxyGet(serviceProxyHang)
		errc <- err
	}()
	require.Eventually(w.t, func() bool { _, h := proxy.Tunnels(); return h > held }, serviceProxyHang, 10*time.Millisecond,
		"the apiserver never asked the egress proxy for %s", addr)
	err := <-errc
	require.Error(w.t, err)
	require.ErrorIs(w.t, err, context.DeadlineExceeded, "the client's own deadline, not an answer: %v", err)
	var st apierrors.APIStatus
	require.False(w.t, errors.As(err, &st), "the apiserver answered: %v", err)
	assert.GreaterOrEqual(w.t, time.Since(begin), serviceProxyHang)
	assert.Equal(w.t, probes, w.wh.Calls(probePath), "nothing reached the webhook server")
	w.t.Logf("service proxy GET, %s cut: no answer from the apiserver in %s (%v)", addr, time.Since(begin).Round(time.Millisecond), err)
}

// requireServiceProxyCompletesOnHeal heals addr while a service proxy GET
// is held on it, and requires that GET to succeed.
func (w *world) requireServiceProxyCompletesOnHeal(addr string) {
	w.t.Helper()
	_, held := proxy.Tunnels()
	probes := w.wh.Calls(probePath)
	type result struct {
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		body, err := w.serviceProxyGet(10 * time.Second)
		done <- result{body, err}
	}()
	require.Eventually(w.t, func() bool { _, h := proxy.Tunnels(); return h > held }, 5*time.Second, 10*time.Millisecond,
		"the apiserver never asked the egress proxy for %s", addr)
	select {
	case r := <-done:
		require.Failf(w.t, "the GET ended on a cut route", "%q %v", r.body, r.err)
	default:
	}
	healed := time.Now()
	proxy.Heal(addr)
	r := <-done
	require.NoError(w.t, r.err)
	assert.Equal(w.t, "ok", r.body)
	assert.Greater(w.t, w.wh.Calls(probePath), probes)
	w.t.Logf("service proxy GET held on %s answered %q %s after the heal", addr, r.body, time.Since(healed).Round(time.Millisecond))
}

func (w *world) requireServiceProxyWorks() {
	w.t.Helper()
	probes := w.wh.Calls(probePath)
	body, err := w.serviceProxyGet(5 * time.Second)
	require.NoError(w.t, err)
	assert.Equal(w.t, "ok", body)
	assert.Greater(w.t, w.wh.Calls(probePath), probes)
}

func (w *world) requireWebhookCalled() {
	w.t.Helper()
	calls := w.wh.APIServerCalls(path)
	require.NoError(w.t, w.createConfigMap("call-"))
	assert.Greater(w.t, w.wh.APIServerCalls(path), calls, "the apiserver called the webhook")
}

func (w *world) requireWebhookCallFails() {
	w.t.Helper()
	_, held := proxy.Tunnels()
	calls := w.wh.APIServerCalls(path)
	begin := time.Now()
	err := w.createConfigMap("cut-")
	require.Error(w.t, err)
	assert.Contains(w.t, err.Error(), `failed calling webhook "`+w.hook+`"`)
	_, h := proxy.Tunnels()
	assert.Greater(w.t, h, held, "the webhook call was held in the egress proxy")
	assert.Equal(w.t, calls, w.wh.APIServerCalls(path))
	w.t.Logf("create, ClusterIP cut: rejected in %s: %v", time.Since(begin).Round(time.Millisecond), err)
}

// What name does kube-apiserver's RBAC see for a service proxy request?
// The path segment as sent, "https:<service>:<port>": a grant of the bare
// Service name, or of the name and port, does not allow it; the rule
// internal/rbac renders from apiserverSignal.pathProbe.service does.
func TestFact_serviceProxyRBACSeesTheSchemeNameAndPort(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.wh.SetBehaviour(probePath, harness.Allow())
	w.podAddr = w.serviceProxyBackend()
	require.Eventually(t, func() bool {
		body, err := w.serviceProxyGet(serviceProxyHang)
		return err == nil && body == "ok"
	}, transition, 50*time.Millisecond, "the service proxy never reached the webhook")
	guard, err := kubernetes.NewForConfig(w.id.Config)
	require.NoError(t, err)
	port := strconv.Itoa(int(w.wh.Port()))
	get := func() (string, error) {
		ctx, cancel := context.WithTimeout(ctx, serviceProxyHang)
		defer cancel()
		res := guard.CoreV1().Services(w.ns).ProxyGet("https", "hook", port, probePath, nil).(*rest.Request).Do(ctx)
		if err := res.Error(); err != nil {
			return "", err
		}
		b, err := res.Raw()
		return string(b), err
	}
	allowed := func(name string) bool {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: w.ns, Verb: "get", Resource: "services", Subresource: "proxy", Name: name,
		}}}
		require.NoError(t, w.id.Client.Create(ctx, review))
		return review.Status.Allowed
	}

	_, err = get()
	requireForbidden(t, err, `services "https:hook:`+port+`" is forbidden`)

	// Grants by other names take effect, and do not allow the request.
	other := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "proxy-by-other-names-" + w.ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"services/proxy"}, Verbs: []string{"get"},
		ResourceNames: []string{"hook", "hook:" + port, "https:hook"},
	}}}
	require.NoError(t, env.Client.Create(ctx, other))
	require.NoError(t, env.Bind(ctx, other.Name, other.Name, w.ns, "webhook-guard"))
	require.Eventually(t, func() bool { return allowed("hook") }, transition, 50*time.Millisecond, "the grant of the bare name never took effect")
	_, err = get()
	requireForbidden(t, err, `services "https:hook:`+port+`" is forbidden`)
	t.Logf("granted %v: GET services/https:hook:%s/proxy is still forbidden", other.Rules[0].ResourceNames, port)

	// The rule internal/rbac renders allows it.
	rule, err := harness.PathProbeRule(w.service())
	require.NoError(t, err)
	assert.Equal(t, []string{"https:hook:" + port}, rule.ResourceNames)
	require.NoError(t, env.GrantPathProbe(ctx, w.id, w.service()))
	body, err := get()
	require.NoError(t, err)
	assert.Equal(t, "ok", body, "the webhook server's own answer")
	assert.False(t, allowed("https:other:"+port), "another Service's name is not granted")
}
