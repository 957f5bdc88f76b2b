package probe

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testCA is a throw-away certificate authority for local TLS servers.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial atomic.Int64

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: "webhook-guard test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf issues a serving certificate with exactly the given SANs.
func (ca *testCA) leaf(t testing.TB, dnsNames []string, ips []net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: "webhook"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

var localhost = []net.IP{net.ParseIP("127.0.0.1")}

// startTLS starts a TLS server on 127.0.0.1 serving cert; it counts requests.
func startTLS(t testing.TB, cert tls.Certificate, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	calls := &atomic.Int64{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		h(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, calls
}

// readReview decodes the AdmissionReview a handler received.
func readReview(t testing.TB, r *http.Request) *admissionv1.AdmissionReview {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		t.Errorf("server received an invalid AdmissionReview: %v", err)
		return &admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{}}
	}
	return &review
}

// answer is a handler that reads the AdmissionReview and writes an allowing
// v1 response for it, after letting mutate change the response.
func answer(t testing.TB, mutate func(*admissionv1.AdmissionReview)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, readReview(t, r), mutate)
	}
}

// writeAnswer writes an allowing v1 response to in, changed by mutate.
func writeAnswer(w http.ResponseWriter, in *admissionv1.AdmissionReview, mutate func(*admissionv1.AdmissionReview)) {
	out := &admissionv1.AdmissionReview{
		TypeMeta: in.TypeMeta,
		Response: &admissionv1.AdmissionResponse{UID: in.Request.UID, Allowed: true},
	}
	if mutate != nil {
		mutate(out)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// recorder hands values from server handlers to the test goroutine; the
// race detector cannot see the ordering a TCP round trip gives.
type recorder[T any] struct {
	mu     sync.Mutex
	values []T
}

func (r *recorder[T]) add(v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.values = append(r.values, v)
}

func (r *recorder[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.values...)
}

// urlWebhook is a dry-run-safe webhook reached at url with caBundle.
func urlWebhook(url string, caBundle []byte) admissionregistrationv1.MutatingWebhook {
	none := admissionregistrationv1.SideEffectClassNone
	return admissionregistrationv1.MutatingWebhook{
		Name: "hook.example.com",
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			URL:      &url,
			CABundle: caBundle,
		},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{"apps"},
				APIVersions: []string{"v1"},
				Resources:   []string{"deployments"},
			},
		}},
		SideEffects:             &none,
		AdmissionReviewVersions: []string{"v1"},
	}
}

// serviceWebhook is a dry-run-safe webhook reached through a service reference.
func serviceWebhook(namespace, name string, port *int32, path string, caBundle []byte) admissionregistrationv1.MutatingWebhook {
	wh := urlWebhook("", caBundle)
	wh.ClientConfig = admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{
			Namespace: namespace, Name: name, Port: port, Path: &path,
		},
		CABundle: caBundle,
	}
	return wh
}

// fakeResolver returns a fixed address or error and records its arguments.
type fakeResolver struct {
	addr string
	err  error

	namespace, name string
	port            int32
}

func (f *fakeResolver) Resolve(_ context.Context, namespace, name string, port int32) (string, error) {
	f.namespace, f.name, f.port = namespace, name, port
	return f.addr, f.err
}

// fakeDiscovery serves fixed groups and resources, as kube-apiserver's
// discovery would, and counts how often it is asked. err, when set, is
// returned instead; errOnce is returned by the next call only.
type fakeDiscovery struct {
	groups  []*metav1.APIGroup
	lists   []*metav1.APIResourceList
	err     error
	errOnce error
	calls   atomic.Int64
	// block, when set, holds every read until it is closed: an apiserver
	// whose seats are full.
	block chan struct{}
}

func (d *fakeDiscovery) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	d.calls.Add(1)
	if d.block != nil {
		<-d.block
	}
	if err := d.errOnce; err != nil {
		d.errOnce = nil
		return nil, nil, err
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	return d.groups, d.lists, nil
}

// served describes one resource for testDiscovery.
type served struct {
	groupVersion string
	name, kind   string
	namespaced   bool
	verbs        []string
}

// crud are the verbs of an ordinary resource.
var crud = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// newDiscovery builds a fakeDiscovery from groups ({name, preferred
// version, other versions...}) and resources. A group's versions are
// listed in name order, so that the preferred one is not always first.
func newDiscovery(groups [][]string, resources []served) *fakeDiscovery {
	d := &fakeDiscovery{}
	for _, g := range groups {
		name, versions := g[0], slices.Clone(g[1:])
		group := &metav1.APIGroup{Name: name}
		gv := func(v string) metav1.GroupVersionForDiscovery {
			if name == "" {
				return metav1.GroupVersionForDiscovery{GroupVersion: v, Version: v}
			}
			return metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v}
		}
		group.PreferredVersion = gv(versions[0])
		slices.Sort(versions)
		for _, v := range versions {
			group.Versions = append(group.Versions, gv(v))
		}
		d.groups = append(d.groups, group)
	}
	lists := map[string]*metav1.APIResourceList{}
	for _, r := range resources {
		l := lists[r.groupVersion]
		if l == nil {
			l = &metav1.APIResourceList{GroupVersion: r.groupVersion}
			lists[r.groupVersion] = l
			d.lists = append(d.lists, l)
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: r.name, Kind: r.kind, Namespaced: r.namespaced, Verbs: r.verbs})
	}
	return d
}

// testDiscovery serves a few built-in resources and cert-manager's CRDs,
// as kube-apiserver's discovery would: autoscaling in v2 (preferred) and
// v1, a subresource (pods/status) and a resource that cannot be created
// (componentstatuses), listed out of order as discovery may.
func testDiscovery() *fakeDiscovery {
	return newDiscovery(
		[][]string{
			{"", "v1"},
			{"apps", "v1"},
			{"batch", "v1"},
			{"autoscaling", "v2", "v1"},
			{"cert-manager.io", "v1"},
			{"acme.cert-manager.io", "v1"},
		},
		[]served{
			{"v1", "pods", "Pod", true, crud},
			{"v1", "pods/status", "Pod", true, []string{"get", "patch", "update"}},
			{"v1", "componentstatuses", "ComponentStatus", false, []string{"get", "list"}},
			{"v1", "namespaces", "Namespace", false, crud},
			{"v1", "configmaps", "ConfigMap", true, crud},
			{"apps/v1", "deployments", "Deployment", true, crud},
			{"apps/v1", "deployments/scale", "Scale", true, []string{"get", "patch", "update"}},
			{"batch/v1", "cronjobs", "CronJob", true, crud},
			{"autoscaling/v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, crud},
			{"autoscaling/v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, crud},
			{"cert-manager.io/v1", "issuers", "Issuer", true, crud},
			{"cert-manager.io/v1", "clusterissuers", "ClusterIssuer", false, crud},
			{"cert-manager.io/v1", "certificates", "Certificate", true, crud},
			{"cert-manager.io/v1", "certificaterequests", "CertificateRequest", true, crud},
			{"cert-manager.io/v1", "certificaterequests/status", "CertificateRequest", true, []string{"get", "patch", "update"}},
			{"acme.cert-manager.io/v1", "orders", "Order", true, crud},
			{"acme.cert-manager.io/v1", "challenges", "Challenge", true, crud},
		},
	)
}

// searchPathNetwork dials names as a pod's stub resolver finds them, with
// a search list and ndots from resolv.conf (the order of Go's
// dnsConfig.nameList): a name with fewer dots than ndots is looked up in
// each search domain first and then as written, one with more as written
// first; an absolute name (a trailing dot) only as written. names maps the
// absolute names that exist to the listener that answers for each.
type searchPathNetwork struct {
	search []string
	ndots  int
	names  map[string]string

	// dialled records each address asked for; found, the name each dial
	// reached.
	dialled, found recorder[string]
}

func (n *searchPathNetwork) dial(ctx context.Context, network, address string) (net.Conn, error) {
	n.dialled.add(address)
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	for _, name := range n.lookups(host) {
		if listener, ok := n.names[name]; ok {
			n.found.add(name)
			return (&net.Dialer{}).DialContext(ctx, network, listener)
		}
	}
	return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
}

// lookups are the names the stub resolver asks for host, in order.
func (n *searchPathNetwork) lookups(host string) []string {
	if strings.HasSuffix(host, ".") {
		return []string{host}
	}
	var searched []string
	for _, domain := range n.search {
		searched = append(searched, host+"."+domain+".")
	}
	if strings.Count(host, ".") >= n.ndots {
		return append([]string{host + "."}, searched...)
	}
	return append(searched, host+".")
}
