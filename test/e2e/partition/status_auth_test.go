package partition

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// The shipped installation's names (deploy/kustomize/base), and what
// internal/status calls them.
const (
	shippedNamespace = "webhook-guard-system"
	shippedLease     = "webhook-guard.webhook-guard.io"
	// shippedLeaseNamespace is where the shipped Deployment keeps its
	// Lease: out of reach of policy engines' */* webhooks.
	shippedLeaseNamespace = "kube-system"
	statusReader          = "webhook-guard-status-reader"
	statusUserRole        = "webhook-guard-status-user"
	statusAudience        = "webhook-guard.io/status"
	statusTokenHeader     = "X-Webhook-Guard-Status-Token"
	shippedMetricsPort    = "metrics"
)

// shippedInstall is the default overlay as "kustomize build" ships it, as
// far as "guard status" reads it, in namespace webhook-guard-system: the
// Deployment, the ServiceAccounts, the status reader's and the user's RBAC
// and the ConfigMap (with the world's configuration under the shipped,
// hashed name). Without a kubelet, the leader is a Pod object made from
// the Deployment's template, named as the guard's hostname, whose address
// the CONNECT proxy routes to the real guard's metrics endpoint on
// loopback.
type shippedInstall struct {
	w   *world
	g   *harness.Guard
	pod *corev1.Pod
	// metricsURL is the guard's metrics endpoint on loopback, HTTPS.
	metricsURL string
	// port is the pod's metrics port, which the apiserver proxies to.
	port int32
}

func startShippedInstall(t *testing.T) *shippedInstall {
	t.Helper()
	ctx := context.Background()
	w := newWorld(t)
	s := &shippedInstall{w: w}
	require.NoError(t, env.EnsureNamespace(ctx, shippedNamespace))

	root, err := harness.RepoRoot()
	require.NoError(t, err)
	built := env.Kustomize(ctx, "build", filepath.Join(root, "deploy", "kustomize", "overlays", "default"))
	require.NoError(t, built.Err, built.Stderr)
	keep := map[string]bool{
		"ServiceAccount/webhook-guard": true, "ServiceAccount/" + statusReader: true,
		"ClusterRole/" + statusReader: true, "ClusterRoleBinding/" + statusReader: true,
		"Role/" + statusUserRole: true, "ClusterRole/" + statusUserRole: true,
		"Deployment/webhook-guard": true,
	}
	var apply [][]byte
	var dep appsv1.Deployment
	for _, doc := range strings.Split(built.Stdout, "\n---\n") {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		meta, _ := obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		key := obj["kind"].(string) + "/" + name
		switch {
		case obj["kind"] == "ConfigMap" && strings.HasPrefix(name, "webhook-guard-config-"):
			obj["data"] = map[string]any{"config.yaml": w.config(true, time.Second)}
			b, err := yaml.Marshal(obj)
			require.NoError(t, err)
			apply = append(apply, b)
		case key == "Deployment/webhook-guard":
			require.NoError(t, yaml.Unmarshal([]byte(doc), &dep))
			apply = append(apply, []byte(doc))
		case keep[key]:
			apply = append(apply, []byte(doc))
		default:
			continue
		}
		delete(keep, key)
	}
	require.Empty(t, keep, "the default overlay no longer ships these")
	r := env.Kubectl(ctx, "", bytes.Join(apply, []byte("\n---\n")), "apply", "-f", "-")
	require.NoError(t, r.Err, r.Stderr)

	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == shippedMetricsPort {
			s.port = p.ContainerPort
		}
	}
	require.NotZero(t, s.port, "the shipped Deployment names no metrics port")
	metricsAddr, err := harness.FreeLoopbackAddr()
	require.NoError(t, err)
	s.metricsURL = "https://" + metricsAddr
	// The Lease where the shipped Deployment keeps it, which is where
	// "guard status" reads it from.
	leaseNamespace, ok := factory.LeaseNamespaceOf(&dep)
	require.True(t, ok, "the shipped Deployment does not say where its Lease is")
	require.Equal(t, shippedLeaseNamespace, leaseNamespace)
	s.g = w.startGuard("leader", true, time.Second, "--leader-elect", "--leader-election-namespace", leaseNamespace,
		"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms",
		"--metrics-bind-address", metricsAddr)

	hostname, err := os.Hostname()
	require.NoError(t, err)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: shippedNamespace, Name: hostname, Labels: dep.Spec.Template.Labels}}
	if err := env.Client.Delete(ctx, pod.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
	}, 10*time.Second, 50*time.Millisecond, "an earlier test's leader pod is not gone")
	pod.Spec = dep.Spec.Template.Spec
	require.NoError(t, env.Client.Create(ctx, pod))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	podIP := "10.250.1." + strings.TrimPrefix(w.ns, "partition-")
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))
	s.pod = pod
	proxy.Route(net.JoinHostPort(podIP, strconv.Itoa(int(s.port))), metricsAddr)

	waitHealthyProbes(t, s.g, 3)
	// The metrics server starts after the caches sync.
	require.Eventually(t, func() bool {
		resp, err := insecureClient.Get(s.metricsURL + "/status")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return true
	}, transition, 50*time.Millisecond, "the guard's metrics endpoint never answered")
	require.Eventually(t, func() bool {
		l := &coordinationv1.Lease{}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: shippedLeaseNamespace, Name: shippedLease}, l) == nil &&
			l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, hostname+"_")
	}, transition, 50*time.Millisecond, "the guard never took the Lease")
	return s
}

// insecureClient talks to the guard's metrics endpoint, whose certificate
// is self-signed (no CertDir), as in the Deployment; kube-apiserver's pods
// proxy does not verify it either.
var insecureClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// token requests a token of namespace/name for the audiences (none: the
// apiserver's own), as an administrator.
func token(t *testing.T, namespace, name string, audiences ...string) string {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	tr, err := env.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// direct sends method path to the guard's metrics endpoint, with token as
// the bearer token if any, and returns the status code and body.
func (s *shippedInstall) direct(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.metricsURL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := insecureClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// proxied GETs /status on the leader pod's metrics port through the
// apiserver's pods proxy as the administrator (a client certificate,
// system:masters), with the headers given, and returns the body or the
// error.
func (s *shippedInstall) proxied(t *testing.T, headers map[string]string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := env.Clientset.CoreV1().RESTClient().Get().Namespace(shippedNamespace).Resource("pods").SubResource("proxy").
		Name("https:" + s.pod.Name + ":" + strconv.Itoa(int(s.port))).Suffix("status")
	for k, v := range headers {
		req = req.SetHeader(k, v)
	}
	res := req.Do(ctx)
	if err := res.Error(); err != nil {
		return "", err
	}
	body, err := res.Raw()
	return string(body), err
}

// requireGuardRefused requires err to be the guard's plain-text answer
// with code, relayed by the apiserver, and not the apiserver's own Status.
func requireGuardRefused(t *testing.T, err error, code int32, text string) {
	t.Helper()
	require.Error(t, err)
	var st apierrors.APIStatus
	require.True(t, errors.As(err, &st), "%v", err)
	assert.Equal(t, code, st.Status().Code, "%v", err)
	require.NotNil(t, st.Status().Details, "%v", err)
	require.Len(t, st.Status().Details.Causes, 1, "%v", err)
	cause := st.Status().Details.Causes[0]
	assert.Equal(t, metav1.CauseTypeUnexpectedServerResponse, cause.Type, "the apiserver's own Status, not the guard's answer: %v", err)
	assert.Equal(t, text, cause.Message)
}

// /status answers only the status reader's token of the status audience,
// on the guard's metrics endpoint and through the apiserver's pods proxy;
// the guard used to serve it to anyone who reached port 8082, and through
// the proxy to anyone with get pods/proxy. A status token does nothing
// else: not /metrics, not the apiserver.
func TestStatus_onlyTheReadersTokenReadsIt(t *testing.T) {
	s := startShippedInstall(t)
	readerToken := token(t, shippedNamespace, statusReader, statusAudience)
	strangerToken := token(t, shippedNamespace, "status-stranger", statusAudience)
	apiserverAudienceToken := token(t, shippedNamespace, statusReader)

	t.Run("without a token, 401", func(t *testing.T) {
		code, body := s.direct(t, http.MethodGet, "/status", "")
		assert.Equal(t, http.StatusUnauthorized, code, body)
		assert.NotContains(t, body, s.w.hook)
	})
	// A token the TokenReview rejects is answered 500 "Authentication
	// failed", not 401: controller-runtime's filter (filters.go) treats
	// the authenticator's error as its own failure, on /metrics too.
	t.Run("the reader's token for the apiserver's audience is refused", func(t *testing.T) {
		code, body := s.direct(t, http.MethodGet, "/status", apiserverAudienceToken)
		assert.Equal(t, http.StatusInternalServerError, code, body)
		assert.Equal(t, "Authentication failed\n", body)
	})
	t.Run("a status token of an identity not granted get /status, 403", func(t *testing.T) {
		code, body := s.direct(t, http.MethodGet, "/status", strangerToken)
		assert.Equal(t, http.StatusForbidden, code, body)
		assert.Contains(t, body, "system:serviceaccount:"+shippedNamespace+":status-stranger")
		assert.NotContains(t, body, s.w.hook)
	})
	t.Run("the reader's status token, 200 and the rows", func(t *testing.T) {
		code, body := s.direct(t, http.MethodGet, "/status", readerToken)
		require.Equal(t, http.StatusOK, code, body)
		var rows []statusRow
		require.NoError(t, json.Unmarshal([]byte(body), &rows), body)
		require.Len(t, rows, 1)
		assert.GreaterOrEqual(t, rows[0].Successes, 3)
	})
	t.Run("the reader's status token may only GET: POST is 403", func(t *testing.T) {
		code, body := s.direct(t, http.MethodPost, "/status", readerToken)
		assert.Equal(t, http.StatusForbidden, code, body)
	})
	t.Run("the reader's status token does not read /metrics", func(t *testing.T) {
		code, body := s.direct(t, http.MethodGet, "/metrics", readerToken)
		assert.Equal(t, http.StatusInternalServerError, code, body)
		assert.Equal(t, "Authentication failed\n", body)
	})
	t.Run("the reader's status token authenticates to no apiserver, 401", func(t *testing.T) {
		rc := rest.AnonymousClientConfig(env.Config)
		rc.BearerToken = readerToken
		cs, err := kubernetes.NewForConfig(rc)
		require.NoError(t, err)
		_, err = cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		assert.True(t, apierrors.IsUnauthorized(err), "%v", err)
	})
	t.Run("through the pods proxy, get pods/proxy alone is 401 from the guard", func(t *testing.T) {
		_, err := s.proxied(t, nil)
		requireGuardRefused(t, err, http.StatusUnauthorized, "Unauthorized")
	})
	t.Run("through the pods proxy, the apiserver deletes Authorization: a token there is 401 from the guard", func(t *testing.T) {
		// The administrator authenticates with its client certificate;
		// the apiserver then deletes the Authorization header before it
		// proxies (k8s.io/apiserver endpoints/filters WithAuthentication).
		_, err := s.proxied(t, map[string]string{"Authorization": "Bearer " + readerToken})
		requireGuardRefused(t, err, http.StatusUnauthorized, "Unauthorized")
	})
	t.Run("through the pods proxy, a stranger's status token in the header is 403 from the guard", func(t *testing.T) {
		_, err := s.proxied(t, map[string]string{statusTokenHeader: strangerToken})
		requireGuardRefused(t, err, http.StatusForbidden, "Authorization denied for user system:serviceaccount:"+shippedNamespace+":status-stranger")
	})
	t.Run("through the pods proxy, the reader's token in the header reads the rows", func(t *testing.T) {
		body, err := s.proxied(t, map[string]string{statusTokenHeader: readerToken})
		require.NoError(t, err)
		var rows []statusRow
		require.NoError(t, json.Unmarshal([]byte(body), &rows), body)
		require.Len(t, rows, 1)
		assert.GreaterOrEqual(t, rows[0].Successes, 3)
	})
}

// A person who holds only the shipped Role and ClusterRole
// webhook-guard-status-user runs "guard status" and gets the leader's
// counts, whether the kubeconfig authenticates with a client certificate
// or a token: neither reaches the pod, the reader's token does. Without
// the token request, the objects' state is still printed and the counts
// are named unavailable.
func TestStatus_aPersonWithOnlyTheShippedRoleReadsTheLeader(t *testing.T) {
	s := startShippedInstall(t)
	ctx := context.Background()
	hostname := s.pod.Name

	// A client-certificate user: the administrator's certificate,
	// impersonating jane, so the apiserver authorizes jane's RBAC. (The
	// harness holds no client CA key to sign jane a certificate of her
	// own.)
	jane := "jane-" + s.w.ns
	certKubeconfig := kubeconfig(t, "jane", &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData, Impersonate: jane})
	bindStatusUser(t, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: jane}, statusUserRole)
	// A token user: a ServiceAccount in the world's namespace.
	person, err := env.ServiceAccount(ctx, s.w.ns, "status-person")
	require.NoError(t, err)
	bindStatusUser(t, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: s.w.ns, Name: "status-person"}, statusUserRole)

	for name, kc := range map[string]string{"a client-certificate user": certKubeconfig, "a token user": person.KubeconfigPath} {
		t.Run(name, func(t *testing.T) {
			out, stderr := statusAs(t, kc, "-o", "json")
			var rep statusJSON
			require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
			assert.Empty(t, rep.Unavailable, stderr)
			assert.Equal(t, hostname, rep.Leader)
			assert.Equal(t, shippedLeaseNamespace+"/"+shippedLease, rep.Lease)
			require.Len(t, rep.Targets, 1)
			assert.Equal(t, s.w.hook, rep.Targets[0].Webhook)
			assert.Equal(t, "Closed", rep.Targets[0].State)
			assert.GreaterOrEqual(t, rep.Targets[0].Successes, 3, "the leader's counts, read through the apiserver")
			assert.True(t, strings.HasPrefix(rep.Targets[0].LastResult, "Healthy ("), rep.Targets[0].LastResult)

			table, stderr := statusAs(t, kc)
			assert.Empty(t, stderr)
			assert.Contains(t, table, "Leader: "+hostname+" (Lease "+shippedLeaseNamespace+"/"+shippedLease+")")
			assert.Contains(t, table, s.w.hook)
		})
	}

	// The token request is for the reader only: not the guard's own
	// ServiceAccount, not any other.
	janeConfig, err := clientcmd.BuildConfigFromFlags("", certKubeconfig)
	require.NoError(t, err)
	janeClient, err := kubernetes.NewForConfig(janeConfig)
	require.NoError(t, err)
	for _, sa := range []string{"webhook-guard", "status-stranger"} {
		_, err := janeClient.CoreV1().ServiceAccounts(shippedNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{statusAudience}, ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		assert.True(t, apierrors.IsForbidden(err), "a token of %s: %v", sa, err)
	}

	// The shipped Role without the token request: what get pods/proxy
	// used to be enough for.
	role := &rbacv1.Role{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: shippedNamespace, Name: statusUserRole}, role))
	noToken := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: shippedNamespace, Name: statusUserRole + "-no-token-" + s.w.ns}}
	for _, rule := range role.Rules {
		if !strings.Contains(strings.Join(rule.Resources, ","), "serviceaccounts/token") {
			noToken.Rules = append(noToken.Rules, rule)
		}
	}
	require.Len(t, noToken.Rules, len(role.Rules)-1)
	require.NoError(t, env.Client.Create(ctx, noToken))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), noToken) })
	joe := "joe-" + s.w.ns
	bindStatusUser(t, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: joe}, noToken.Name)
	joeKubeconfig := kubeconfig(t, "joe", &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData, Impersonate: joe})
	out, stderr := statusAs(t, joeKubeconfig, "-o", "json")
	var rep statusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Unavailable, 1, stderr)
	assert.Contains(t, rep.Unavailable[0], "requesting a token of ServiceAccount "+shippedNamespace+"/"+statusReader)
	assert.Contains(t, rep.Unavailable[0], "forbidden")
	require.Len(t, rep.Targets, 1)
	assert.Equal(t, "Closed", rep.Targets[0].State, "the objects' state is still read")
	assert.Zero(t, rep.Targets[0].Successes)
}

// bindStatusUser binds the shipped Role (roleName in the installation's
// namespace) and the ClusterRole webhook-guard-status-user to subject,
// and waits until RBAC lets the subject list webhook configurations.
func bindStatusUser(t *testing.T, subject rbacv1.Subject, roleName string) {
	t.Helper()
	ctx := context.Background()
	name := "status-user-" + strings.ToLower(strings.NewReplacer(":", "-", "@", "-").Replace(subject.Name))
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: shippedNamespace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: roleName},
		Subjects:   []rbacv1.Subject{subject},
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: statusUserRole},
		Subjects:   []rbacv1.Subject{subject},
	}
	for _, b := range []client.Object{rb, crb} {
		require.NoError(t, env.Client.Create(ctx, b))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), b) })
	}
	user, groups := subject.Name, []string{"system:authenticated"}
	if subject.Kind == rbacv1.ServiceAccountKind {
		user = "system:serviceaccount:" + subject.Namespace + ":" + subject.Name
		groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+subject.Namespace)
	}
	require.Eventually(t, func() bool {
		for _, attrs := range []*authorizationv1.ResourceAttributes{
			{Verb: "list", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"},
			{Verb: "get", Resource: "pods", Subresource: "proxy", Namespace: shippedNamespace},
		} {
			sar, err := env.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups, ResourceAttributes: attrs,
			}}, metav1.CreateOptions{})
			if err != nil || !sar.Status.Allowed {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "RBAC for %s never took effect", user)
}

// kubeconfig writes a kubeconfig for this apiserver with the given
// credentials.
func kubeconfig(t *testing.T, name string, auth *clientcmdapi.AuthInfo) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos[name] = auth
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	kc.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// statusAs runs "guard status" against the shipped installation with the
// given kubeconfig and nothing else.
func statusAs(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string) {
	t.Helper()
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"status", "--kubeconfig", kubeconfig, "--namespace", shippedNamespace}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "guard status: %s", errb.String())
	return out.String(), errb.String()
}
