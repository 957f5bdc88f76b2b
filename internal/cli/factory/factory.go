package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// Scheme is the scheme of every client the factory builds, and of the
// manager "guard run" starts: client-go's types and cert-manager's.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(certmanagerv1.AddToScheme(Scheme))
}

// DefaultDeployment is the guard's Deployment in the shipped manifests.
const DefaultDeployment = "webhook-guard"

// configVolume and configKey locate the GuardConfiguration in the guard's
// Deployment (deploy/kustomize/base/deployment.yaml).
const (
	configVolume = "config"
	configKey    = "config.yaml"
)

// Loader loads the REST configuration of a kubeconfig file and context;
// empty strings mean the defaults. LoadRESTConfig is the real one; tests
// pass one that fails the test, to prove a command validated its input
// before it reached for the cluster.
type Loader func(kubeconfig, context string) (*rest.Config, error)

// Factory owns the flags that say which cluster, installation and
// configuration a command works on, and builds its clients once.
// Commands bind the flags they take (AddKubeconfigFlags,
// AddInstallationFlags, AddConfigFlag), then call ReadConfigFile in
// Validate and Complete in Complete.
type Factory struct {
	// Kubeconfig is the kubeconfig file (--kubeconfig). Default empty:
	// $KUBECONFIG, else the pod's ServiceAccount in a cluster, else
	// ~/.kube/config, as controller-runtime's GetConfig finds it.
	Kubeconfig string
	// Context is the kubeconfig context (--context). Default empty: the
	// kubeconfig's current context.
	Context string
	// Namespace is the installation's namespace (-n, --namespace): its
	// Deployment and status reader are there, and its Lease unless the
	// Deployment says otherwise (LeaseNamespace). Default
	// circuit.DefaultNamespace, whatever the kubeconfig context says.
	Namespace string
	// Deployment is the guard's Deployment (--deployment), whose volume
	// "config" names the ConfigMap of the installed configuration.
	// Default DefaultDeployment.
	Deployment string
	// ConfigPath is the GuardConfiguration file (--config). Default
	// empty: ReadInstalledConfig reads the installed one; "guard run" and
	// "guard manifests" require it.
	ConfigPath string

	// Config is the GuardConfiguration, once read: by ReadConfigFile
	// from ConfigPath, or by ReadInstalledConfig from the cluster.
	Config *config.Configuration
	// ConfigSource says where Config came from, for people.
	ConfigSource string

	// RESTConfig, KubeClient and Client are built by Complete: the REST
	// configuration, a client-go clientset and a controller-runtime
	// client (direct, without a cache) with Scheme.
	RESTConfig *rest.Config
	KubeClient kubernetes.Interface
	Client     client.Client

	// connection holds the connection flags kubectl has (k8s.io/cli-runtime's
	// ConfigFlags), with kubectl's names and meanings, applied on top of the
	// loaded configuration (AddKubeconfigFlags). "guard release" and
	// "unmutated --clear" run as an administrator, which --as makes easy.
	// cli-runtime itself is not imported: its genericclioptions package
	// brings kustomize's API and kubectl's printers into the service's
	// binary.
	connection connectionFlags
	// leaseNamespace is LeaseNamespace's answer, once found.
	leaseNamespace string

	load Loader
}

// New returns a Factory whose REST configuration comes from load, or
// from LoadRESTConfig when load is nil.
func New(load Loader) *Factory {
	if load == nil {
		load = LoadRESTConfig
	}
	f := &Factory{Namespace: circuit.DefaultNamespace, Deployment: DefaultDeployment, load: load}
	return f
}

// AddKubeconfigFlags adds --kubeconfig and --context to fs.
func (f *Factory) AddKubeconfigFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "Kubeconfig file; default: $KUBECONFIG, else the pod's ServiceAccount in a cluster, else ~/.kube/config.")
	fs.StringVar(&f.Context, "context", "", "Kubeconfig context; default: its current context.")
	fs.StringVar(&f.connection.as, "as", "", "Username to impersonate for the operation (kubectl's --as).")
	fs.StringArrayVar(&f.connection.asGroups, "as-group", nil, "Group to impersonate for the operation; repeat for several (kubectl's --as-group).")
	fs.StringVar(&f.connection.token, "token", "", "Bearer token for authentication to the API server (kubectl's --token).")
	fs.StringVar(&f.connection.server, "server", "", "The address and port of the Kubernetes API server (kubectl's --server).")
	fs.StringVar(&f.connection.timeout, "request-timeout", "0", "How long to wait for a single request to the API server: a duration with a unit (30s, 1m) or whole seconds; 0 waits as long as it takes (kubectl's --request-timeout).")
}

// AddInstallationFlags adds -n/--namespace and --deployment to fs.
func (f *Factory) AddInstallationFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&f.Namespace, "namespace", "n", f.Namespace, "Namespace of the guard's installation (its Deployment and installed configuration; its Lease is where the Deployment's --leader-election-namespace says): where the guard runs, not where your objects are, so unlike kubectl's -n it does not default to the kubeconfig context's namespace.")
	fs.StringVar(&f.Deployment, "deployment", f.Deployment, "The guard's Deployment, whose volume \"config\" names the installed ConfigMap.")
}

// AddConfigFlag adds --config to fs, with the command's own usage.
func (f *Factory) AddConfigFlag(fs *pflag.FlagSet, usage string) {
	fs.StringVar(&f.ConfigPath, "config", "", usage)
}

// InstalledConfigUsage is --config's usage on the commands that read the
// installed configuration from the cluster when it is not given.
const InstalledConfigUsage = "GuardConfiguration file; default: the one installed in the cluster (the ConfigMap --deployment mounts)."

// AddInstallationReaderFlags adds the flags of a command that reads an
// installation from the cluster: --config (with configUsage), -n/--namespace,
// --deployment, --kubeconfig and --context.
func (f *Factory) AddInstallationReaderFlags(fs *pflag.FlagSet, configUsage string) {
	f.AddConfigFlag(fs, configUsage)
	f.AddInstallationFlags(fs)
	f.AddKubeconfigFlags(fs)
}

// ReadConfigFile reads and validates ConfigPath into Config, when it is
// set. It touches no cluster: commands call it from Validate.
func (f *Factory) ReadConfigFile() error {
	if f.ConfigPath == "" {
		return nil
	}
	cfg, err := config.Load(f.ConfigPath)
	if err != nil {
		return err
	}
	f.Config, f.ConfigSource = cfg, "file "+f.ConfigPath
	return nil
}

// Complete loads the REST configuration and builds the clients, once.
// Building them sends no request.
func (f *Factory) Complete() error {
	if f.RESTConfig != nil {
		return nil
	}
	rc, err := f.load(f.Kubeconfig, f.Context)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	if err := f.applyConnectionFlags(rc); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("creating a clientset: %w", err)
	}
	c, err := client.New(rc, client.Options{Scheme: Scheme})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	f.RESTConfig, f.KubeClient, f.Client = rc, cs, c
	return nil
}

// connectionFlags are kubectl's connection flags the Factory binds.
type connectionFlags struct {
	as       string
	asGroups []string
	token    string
	server   string
	timeout  string
}

// applyConnectionFlags sets what --as, --as-group, --token, --server and
// --request-timeout say on rc, as kubectl's overrides do.
func (f *Factory) applyConnectionFlags(rc *rest.Config) error {
	c := f.connection
	if c.as != "" || len(c.asGroups) > 0 {
		rc.Impersonate = rest.ImpersonationConfig{UserName: c.as, Groups: c.asGroups}
	}
	if c.token != "" {
		rc.BearerToken, rc.BearerTokenFile = c.token, ""
		rc.Username, rc.Password = "", ""
		rc.CertFile, rc.KeyFile, rc.CertData, rc.KeyData = "", "", nil, nil
		rc.ExecProvider, rc.AuthProvider = nil, nil
	}
	if c.server != "" {
		rc.Host = c.server
	}
	if c.timeout == "" {
		c.timeout = "0"
	}
	timeout, err := requestTimeout(c.timeout)
	if err != nil {
		return cli.Usagef("--request-timeout %q: %v", c.timeout, err)
	}
	if timeout > 0 {
		rc.Timeout = timeout
	}
	return nil
}

// requestTimeout parses --request-timeout as kubectl does: a duration
// with a unit (1s, 2m, 3h), or a bare integer of seconds; 0 means none.
func requestTimeout(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		s = strconv.Itoa(n) + "s"
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration with a unit (30s, 1m) or whole seconds")
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}

// ReadInstalledConfig reads, unless Config is already set, the
// GuardConfiguration the guard's Deployment mounts: its volume "config"
// names the ConfigMap (kustomize suffixes its name with a hash), whose
// key config.yaml is the file. It needs Complete first.
func (f *Factory) ReadInstalledConfig(ctx context.Context) error {
	if f.Config != nil {
		return nil
	}
	ns, name := f.Namespace, f.Deployment
	d := &appsv1.Deployment{}
	if err := f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		return fmt.Errorf("reading the guard's Deployment %s/%s: %w", ns, name, err)
	}
	f.noteLeaseNamespace(d)
	cmName := ""
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == configVolume && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if cmName == "" {
		return fmt.Errorf("the Deployment %s/%s has no ConfigMap volume named %q", ns, name, configVolume)
	}
	cm := &corev1.ConfigMap{}
	if err := f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cmName}, cm); err != nil {
		return fmt.Errorf("reading the installed configuration, ConfigMap %s/%s: %w", ns, cmName, err)
	}
	data, ok := cm.Data[configKey]
	if !ok {
		return fmt.Errorf("ConfigMap %s/%s has no key %s", ns, cmName, configKey)
	}
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s key %s: %w", ns, cmName, configKey, err)
	}
	f.Config, f.ConfigSource = cfg, fmt.Sprintf("ConfigMap %s/%s (mounted by Deployment %s)", ns, cmName, name)
	return nil
}

// LoadRESTConfig loads the REST configuration the way controller-runtime's
// GetConfig does, with the kubeconfig and context given as arguments
// rather than as process-wide flags: an explicit kubeconfig first; else,
// without $KUBECONFIG and without a context, the pod's ServiceAccount when
// in a cluster; else client-go's default loading rules ($KUBECONFIG,
// ~/.kube/config). Like GetConfig, it turns client-side rate limiting off
// (QPS -1) unless the kubeconfig sets it: the apiserver's priority and
// fairness limits instead.
func LoadRESTConfig(kubeconfig, context string) (*rest.Config, error) {
	rc, err := loadRESTConfig(kubeconfig, context)
	if err != nil {
		return nil, err
	}
	if rc.QPS == 0 {
		rc.QPS = -1
	}
	return rc, nil
}

func loadRESTConfig(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
	} else if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" && context == "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		}
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
}
