package factory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
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

// Loader loads the REST configuration of the kubeconfig the connection
// flags choose. LoadRESTConfig is the real one; tests pass one that fails
// the test, to prove a command validated its input before it reached for
// the cluster.
type Loader func(clientcmd.ClientConfig) (*rest.Config, error)

// Factory owns the flags that say which cluster, installation and
// configuration a command works on, and builds its clients once.
// Commands bind the flags they take (AddKubeconfigFlags,
// AddInstallationFlags, AddConfigFlag), call ReadConfigFile in Validate
// and Complete in Complete, and RegisterCompletions once the flags are
// bound.
type Factory struct {
	// ConfigFlags are kubectl's connection flags, from k8s.io/cli-runtime,
	// with kubectl's names, defaults and meanings: --kubeconfig,
	// --context, --cluster, --user, --server, --tls-server-name,
	// --certificate-authority, --client-certificate, --client-key,
	// --insecure-skip-tls-verify, --token, --as, --as-group, --as-uid,
	// --as-user-extra, --request-timeout, --disable-compression,
	// --proxy-url (AddKubeconfigFlags) and -n/--namespace
	// (AddInstallationFlags). The kubeconfig is found as kubectl finds it:
	// --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else the pod's
	// ServiceAccount in a cluster. --cache-dir is left out: no command
	// caches discovery.
	ConfigFlags *genericclioptions.ConfigFlags
	// GuardNamespace is the installation's namespace: its Deployment and
	// status reader are there, and its Lease unless the Deployment says
	// otherwise (LeaseNamespace). Complete finds it (FindInstallation)
	// when the command binds AddInstallationFlags. Default
	// circuit.DefaultNamespace.
	GuardNamespace string
	// GuardNamespaceSource says how GuardNamespace was found, for people
	// and for -v.
	GuardNamespaceSource string
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

	// installation is set when the command binds AddInstallationFlags:
	// Complete then finds GuardNamespace.
	installation bool
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
	flags := genericclioptions.NewConfigFlags(false)
	flags.CacheDir = nil
	return &Factory{ConfigFlags: flags, GuardNamespace: circuit.DefaultNamespace, Deployment: DefaultDeployment, load: load}
}

// AddKubeconfigFlags adds kubectl's connection flags (ConfigFlags) to fs,
// all but -n/--namespace, which AddInstallationFlags adds.
func (f *Factory) AddKubeconfigFlags(fs *pflag.FlagSet) {
	ns := f.ConfigFlags.Namespace
	f.ConfigFlags.Namespace = nil
	f.ConfigFlags.AddFlags(fs)
	f.ConfigFlags.Namespace = ns
}

// NamespaceUsage is -n/--namespace's usage.
const NamespaceUsage = "As in kubectl, the namespace of the request: here, the guard's installation (its Deployment, installed configuration and status reader; " +
	"its Lease is where the Deployment's --leader-election-namespace says). " +
	"Default: the kubeconfig context's namespace when the guard's Deployment (--deployment) is there, " +
	"else the namespace of the only Deployment of that name in the cluster, else " + circuit.DefaultNamespace + "."

// AddInstallationFlags adds -n/--namespace (kubectl's, from ConfigFlags)
// and --deployment to fs; Complete then finds the installation.
func (f *Factory) AddInstallationFlags(fs *pflag.FlagSet) {
	f.installation = true
	fs.StringVarP(f.ConfigFlags.Namespace, "namespace", "n", *f.ConfigFlags.Namespace, NamespaceUsage)
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
// installation from the cluster: --config (with configUsage),
// -n/--namespace, --deployment and kubectl's connection flags.
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

// Complete builds the clients, once, and, when the command binds
// AddInstallationFlags, finds the installation (FindInstallation), which
// reads the guard's Deployment.
func (f *Factory) Complete(ctx context.Context) error {
	if err := f.buildClients(); err != nil {
		return err
	}
	if !f.installation {
		return nil
	}
	return f.FindInstallation(ctx)
}

// buildClients loads the REST configuration and builds the clients, once.
// It sends no request.
func (f *Factory) buildClients() error {
	if f.RESTConfig != nil {
		return nil
	}
	// clientcmd parses --request-timeout too, but its error names no
	// flag and is no usage error.
	if t := f.ConfigFlags.Timeout; t != nil && *t != "" {
		if _, err := requestTimeout(*t); err != nil {
			return cli.Usagef("--request-timeout %q: %v", *t, err)
		}
	}
	rc, err := f.load(f.ConfigFlags.ToRawKubeConfigLoader())
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
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

// FindInstallation sets GuardNamespace, the installation's namespace, as
// kubectl chooses a namespace and then looks for the guard's Deployment:
// -n/--namespace when given; else the kubeconfig context's namespace (a
// pod's own in a cluster) when the Deployment --deployment is there; else
// the namespace of the only Deployment of that name in the cluster; else
// circuit.DefaultNamespace, as shipped. Several Deployments of that name,
// and no -n, is an error that names their namespaces. A Deployment that
// cannot be read or listed (RBAC) counts as absent. It needs the clients
// (Complete).
func (f *Factory) FindInstallation(ctx context.Context) error {
	if ns := *f.ConfigFlags.Namespace; ns != "" {
		f.setGuardNamespace(ns, "-n/--namespace")
		return nil
	}
	contextNS, _, err := f.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	if err == nil && contextNS != "" {
		d := &appsv1.Deployment{}
		if err := f.Client.Get(ctx, client.ObjectKey{Namespace: contextNS, Name: f.Deployment}, d); err == nil {
			f.setGuardNamespace(contextNS, "the kubeconfig context's namespace, where Deployment "+f.Deployment+" is")
			return nil
		}
	}
	list := &appsv1.DeploymentList{}
	if err := f.Client.List(ctx, list, client.MatchingFields{"metadata.name": f.Deployment}); err == nil {
		var namespaces []string
		for _, d := range list.Items {
			if d.Name == f.Deployment {
				namespaces = append(namespaces, d.Namespace)
			}
		}
		switch len(namespaces) {
		case 0:
		case 1:
			f.setGuardNamespace(namespaces[0], "the only Deployment "+f.Deployment+" in the cluster")
			return nil
		default:
			if slices.Contains(namespaces, circuit.DefaultNamespace) {
				f.setGuardNamespace(circuit.DefaultNamespace, "the default namespace, one of the Deployments "+f.Deployment+" in "+strings.Join(namespaces, ", "))
				return nil
			}
			return cli.Usagef("Deployments named %s in namespaces %s, none in the kubeconfig context's namespace: say which installation with -n/--namespace",
				f.Deployment, strings.Join(namespaces, ", "))
		}
	}
	f.setGuardNamespace(circuit.DefaultNamespace, "the default: no Deployment "+f.Deployment+" found")
	return nil
}

func (f *Factory) setGuardNamespace(ns, source string) {
	f.GuardNamespace, f.GuardNamespaceSource, f.leaseNamespace = ns, source, ""
	klog.V(1).InfoS("The guard's installation", "namespace", ns, "foundBy", source)
}

// ReadInstalledConfig reads, unless Config is already set, the
// GuardConfiguration the guard's Deployment mounts: its volume "config"
// names the ConfigMap (kustomize suffixes its name with a hash), whose
// key config.yaml is the file. It needs Complete first.
func (f *Factory) ReadInstalledConfig(ctx context.Context) error {
	if f.Config != nil {
		return nil
	}
	ns, name := f.GuardNamespace, f.Deployment
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

// LoadRESTConfig loads the REST configuration of cc, as kubectl loads it
// from its connection flags. Like controller-runtime's GetConfig, it turns
// client-side rate limiting off (QPS -1) unless the kubeconfig sets it:
// the apiserver's priority and fairness limits instead.
func LoadRESTConfig(cc clientcmd.ClientConfig) (*rest.Config, error) {
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, err
	}
	if rc.QPS == 0 {
		rc.QPS = -1
	}
	return rc, nil
}
