package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
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
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ServiceCIDR is the apiserver's service range. It lies inside loopback so
// that a ClusterIP Service can front a process on this machine, the way
// kube-apiserver's ClusterIP resolver reaches webhooks on a real cluster.
const ServiceCIDR = "127.0.1.0/24"

// AdminUsername is the username of Env's admin identity.
const AdminUsername = "e2e-admin"

// Env is a running control plane.
type Env struct {
	// Config is an admin (system:masters) rest config, for AdminUsername.
	Config *rest.Config
	// Client is an admin controller-runtime client.
	Client client.Client
	// Clientset is an admin typed clientset.
	Clientset kubernetes.Interface
	// KubeconfigPath is an admin kubeconfig file for kubectl.
	KubeconfigPath string
	// BinDir holds kube-apiserver, etcd, kubectl and kustomize.
	BinDir string
	// StaticManifestsDir is the apiserver's staticManifestsDir. The apiserver
	// reads it at startup and then about once a minute.
	StaticManifestsDir string
	// Static is the webhook served for the static manifest the harness
	// installs before the apiserver starts; see StaticPrefix.
	Static *Webhook
	// Dir is a scratch folder removed by Stop.
	Dir string

	env          *envtest.Environment
	apiserverLog *os.File

	buildOnce sync.Once
	guardBin  string
	buildErr  error

	failpointOnce sync.Once
	failpointBin  string
	failpointErr  error

	// usernames maps each Identity's KubeconfigPath to its Username, so
	// that StartGuard installs the guard policy for the identity a guard
	// runs as, as the installer renders it for its ServiceAccount.
	usernames sync.Map
}

// StaticPrefix is the name prefix of the MutatingWebhookConfigurations that
// the harness's static (manifest-based) ValidatingWebhookConfiguration
// matches. Other objects never reach it, so it cannot disturb other tests.
const StaticPrefix = "static-"

// StaticWebhookPath is the path the static manifest calls on Env.Static.
const StaticWebhookPath = "/static-validate"

// Options tune Start.
type Options struct {
	// ExtraStaticManifests are written to StaticManifestsDir, by file name,
	// before the apiserver starts. The apiserver reads them at startup.
	ExtraStaticManifests map[string][]byte
	// APIServerFlags are extra kube-apiserver flags, by name without the
	// leading dashes (for example "egress-selector-config-file"). A test
	// that needs them gets its own package and control plane.
	APIServerFlags map[string]string
}

// BinDir returns the folder with the control-plane binaries. It honours
// KUBEBUILDER_ASSETS; otherwise it runs hack/tools/install.sh, which builds
// whatever is missing (about 11 minutes the first time on 2 cores) and
// caches it outside the repository.
func BinDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "tools", "install.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building control-plane binaries with hack/tools/install.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RepoRoot finds the repository root: the nearest folder, from the
// working directory up, whose go.mod declares this module. (Source paths
// from runtime.Caller are useless under -trimpath.)
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/webhook-guard/webhook-guard\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the webhook-guard repository: no go.mod for github.com/webhook-guard/webhook-guard above the working directory")
		}
		dir = parent
	}
}

// Start builds (if needed) and starts etcd and kube-apiserver.
func Start(opts Options) (_ *Env, err error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "webhook-guard-e2e-")
	if err != nil {
		return nil, err
	}
	e := &Env{BinDir: bin, Dir: dir, StaticManifestsDir: filepath.Join(dir, "static")}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	if err := os.MkdirAll(e.StaticManifestsDir, 0o755); err != nil {
		return nil, err
	}

	// The static webhook must exist before the apiserver starts: the
	// apiserver loads static manifests at startup and only re-reads them
	// about once a minute afterwards.
	e.Static, err = StartWebhook(WebhookOptions{Host: "127.0.0.1"})
	if err != nil {
		return nil, fmt.Errorf("starting the static admission webhook: %w", err)
	}
	e.Static.SetBehaviour(StaticWebhookPath, Allow())
	if err := os.WriteFile(filepath.Join(e.StaticManifestsDir, "harness.yaml"), e.staticManifest(), 0o644); err != nil {
		return nil, err
	}
	for name, data := range opts.ExtraStaticManifests {
		if err := os.WriteFile(filepath.Join(e.StaticManifestsDir, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	admissionConfig := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(admissionConfig, []byte(fmt.Sprintf(admissionConfigTemplate, e.StaticManifestsDir)), 0o644); err != nil {
		return nil, err
	}

	e.env = &envtest.Environment{
		BinaryAssetsDirectory:    bin,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	api := e.env.ControlPlane.GetAPIServer()
	// A CertDir of our own, not envtest's temporary one: envtest forgets a
	// temporary CertDir on Stop and mints new serving certificates and
	// service-account keys on the next Start, which would orphan every
	// client and token handed out. With a fixed one, RestartAPIServer
	// brings back the same certificates, keys, client CA and port.
	api.CertDir = filepath.Join(dir, "apiserver")
	if err := os.MkdirAll(api.CertDir, 0o700); err != nil {
		return nil, err
	}
	if e.apiserverLog, err = os.Create(filepath.Join(dir, "kube-apiserver.log")); err != nil {
		return nil, err
	}
	api.Out, api.Err = e.apiserverLog, e.apiserverLog
	api.Configure().Set("service-cluster-ip-range", ServiceCIDR)
	// Without it a graceful stop waits for every open watch (an informer
	// holds one for as long as it runs) until the apiserver's own
	// one-minute shutdown timeout. With it, watches are ended within the
	// grace period and informers re-list from the restarted apiserver.
	api.Configure().Set("shutdown-watch-termination-grace-period", "1s")
	api.Configure().Set("admission-control-config-file", admissionConfig)
	for name, value := range opts.APIServerFlags {
		api.Configure().Set(name, value)
	}
	if _, err := e.env.Start(); err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", bin, err)
	}
	admin, err := e.env.AddUser(envtest.User{Name: AdminUsername, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding the admin user: %w", err)
	}
	e.Config = admin.Config()
	e.Config.QPS, e.Config.Burst = 200, 400
	if e.Client, err = client.New(e.Config, client.Options{}); err != nil {
		return nil, err
	}
	if e.Clientset, err = kubernetes.NewForConfig(e.Config); err != nil {
		return nil, err
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		return nil, err
	}
	e.KubeconfigPath = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(e.KubeconfigPath, kc, 0o600); err != nil {
		return nil, err
	}
	return e, nil
}

const admissionConfigTemplate = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: ""
    staticManifestsDir: %q
`

func (e *Env) staticManifest() []byte {
	return []byte(fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: harness.static.k8s.io
webhooks:
- name: harness.static.webhook-guard.io
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 5
  clientConfig:
    url: %q
    caBundle: %s
  rules:
  - apiGroups: ["admissionregistration.k8s.io"]
    apiVersions: ["v1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["mutatingwebhookconfigurations"]
  matchConditions:
  - name: harness-objects-only
    expression: "object.metadata.name.startsWith('%s')"
`, e.Static.URL(StaticWebhookPath), e.Static.CABundleBase64(), StaticPrefix))
}

// StopAPIServer stops kube-apiserver gracefully (SIGTERM, as a kubelet
// would, so in-flight requests finish) and waits for it to exit. etcd
// keeps running, so every object survives. Clients see connections
// refused until StartAPIServer.
func (e *Env) StopAPIServer() error {
	if err := e.env.ControlPlane.GetAPIServer().Stop(); err != nil {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer and waits
// until /healthz answers. It serves on the same address and port, with
// the same serving certificate, the same client-certificate CA and the
// same service-account signing key, against the same etcd: every
// rest.Config, kubeconfig and ServiceAccount token handed out before keeps
// working. (Another process could take the port while it is free; the
// start then fails and says so.)
func (e *Env) StartAPIServer() error {
	if err := e.env.ControlPlane.GetAPIServer().Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	return nil
}

// RestartAPIServer stops kube-apiserver, keeps it down for downFor (or
// until ctx ends), and starts it again: see StopAPIServer and
// StartAPIServer. It returns how long the apiserver was unreachable, from
// the start of the stop to the moment it was healthy again.
func (e *Env) RestartAPIServer(ctx context.Context, downFor time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := e.StopAPIServer(); err != nil {
		return 0, err
	}
	select {
	case <-time.After(downFor):
	case <-ctx.Done():
	}
	if err := e.StartAPIServer(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// APIServerLog returns what kube-apiserver printed, across restarts.
func (e *Env) APIServerLog() string {
	b, _ := os.ReadFile(e.apiserverLog.Name())
	return string(b)
}

// Stop stops the control plane and the static webhook and removes Dir.
func (e *Env) Stop() {
	if e.env != nil {
		_ = e.env.Stop()
	}
	if e.Static != nil {
		e.Static.Close()
	}
	if e.apiserverLog != nil {
		_ = e.apiserverLog.Close()
	}
	if e.Dir != "" {
		_ = os.RemoveAll(e.Dir)
	}
}

// Identity is a ServiceAccount with a real token from the TokenRequest API.
type Identity struct {
	// Username is system:serviceaccount:<namespace>:<name>.
	Username string
	// Config authenticates with the token.
	Config *rest.Config
	// Client uses Config.
	Client client.Client
	// KubeconfigPath is a kubeconfig file that uses the token.
	KubeconfigPath string
	// Token is the bearer token. Never log it.
	Token string
}

// ServiceAccount creates namespace/name (and the namespace) if missing and
// returns an identity authenticated by a fresh TokenRequest token, so RBAC
// and admission see exactly what they would see for an in-cluster pod.
func (e *Env) ServiceAccount(ctx context.Context, namespace, name string) (*Identity, error) {
	if err := e.EnsureNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := e.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	tr, err := e.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	id := &Identity{Username: fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name), Token: tr.Status.Token}
	id.Config = rest.AnonymousClientConfig(e.Config)
	id.Config.BearerToken = id.Token
	if id.Client, err = client.New(id.Config, client.Options{}); err != nil {
		return nil, err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: id.Token}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	kc.CurrentContext = "e2e"
	id.KubeconfigPath = filepath.Join(e.Dir, fmt.Sprintf("sa-%s-%s.kubeconfig", namespace, name))
	if err := clientcmd.WriteToFile(*kc, id.KubeconfigPath); err != nil {
		return nil, err
	}
	e.usernames.Store(id.KubeconfigPath, id.Username)
	return id, nil
}

// Bind grants a ClusterRole to a subject cluster-wide, for tests that need
// a ServiceAccount with given permissions.
func (e *Env) Bind(ctx context.Context, name, clusterRole, namespace, serviceAccount string) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: serviceAccount}},
	}
	if err := e.Client.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding %s to %s/%s: %w", clusterRole, namespace, serviceAccount, err)
	}
	return nil
}

// EnsureNamespace creates a namespace if it does not exist.
func (e *Env) EnsureNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// ServiceFor creates a ClusterIP Service namespace/name with the given
// ClusterIP and port, so that a webhook listening on ip:port is reachable
// through clientConfig.service exactly as on a real cluster.
func (e *Env) ServiceFor(ctx context.Context, namespace, name, ip string, port int32) error {
	if err := e.EnsureNamespace(ctx, namespace); err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP: ip,
			Ports:     []corev1.ServicePort{{Name: "https", Port: port, Protocol: corev1.ProtocolTCP}},
		},
	}
	if err := e.Client.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating Service %s/%s at %s:%d: %w", namespace, name, ip, port, err)
	}
	return nil
}

// Result is what a command printed and how it ended.
type Result struct {
	Stdout, Stderr string
	Err            error
}

// Kubectl runs the real kubectl with the given kubeconfig (admin if empty).
func (e *Env) Kubectl(ctx context.Context, kubeconfig string, stdin []byte, args ...string) Result {
	if kubeconfig == "" {
		kubeconfig = e.KubeconfigPath
	}
	return run(ctx, stdin, filepath.Join(e.BinDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

// Kustomize runs the real kustomize.
func (e *Env) Kustomize(ctx context.Context, args ...string) Result {
	return run(ctx, nil, filepath.Join(e.BinDir, "kustomize"), args...)
}

func run(ctx context.Context, stdin []byte, name string, args ...string) Result {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	return Result{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
}

// NextServiceIP returns a ClusterIP in ServiceCIDR that no other caller
// in this process has been given, for a test's own webhook Service.
func NextServiceIP() string {
	n := nextIP.Add(1)
	return fmt.Sprintf("127.0.1.%d", 10+(n-1)%240)
}

var nextIP atomic.Uint32
