package run

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/time/rate"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	webhookadmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/webhook-guard/webhook-guard/certs"
	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/cli/startcheck"
	"github.com/webhook-guard/webhook-guard/internal/cli/version"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/probe"
	"github.com/webhook-guard/webhook-guard/internal/status"
)

// whoAmITimeout bounds the SelfSubjectReview at start: the service fails
// to start rather than wait forever on the apiserver.
const whoAmITimeout = 30 * time.Second

const long = `Runs the breaker and the guard: the service. It validates --config and
the ports it will serve on, makes its start checks (the permissions and
rules of every target, other installations, open circuits of removed
targets, the marking policies), then probes the targets and opens and
closes their circuits, with leader election when --leader-elect is set.
A failed check names what is wrong; the service then does not start.`

// NewOptions returns the Options of "guard run" on f, writing to streams,
// for the binary build.
func NewOptions(streams cli.IOStreams, f *factory.Factory, build version.Build) *Options {
	return &Options{Factory: f, IOStreams: streams, Build: build}
}

// NewCmd returns "guard run". It only binds flags.
func NewCmd(streams cli.IOStreams, f *factory.Factory, build version.Build) *cobra.Command {
	o := NewOptions(streams, f, build)
	cmd := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Run the breaker and the guard (the service)",
		Long:  long,
		Args:  cli.NoArgs,
		// The log of the service, configured by the zap flags. It replaces
		// the root command's: cobra runs only the nearest
		// PersistentPreRun, and controller-runtime takes the first logger
		// it is given.
		PersistentPreRun: func(*cobra.Command, []string) {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.Zap), zap.WriteTo(o.ErrOut)))
		},
		RunE: cli.RunE(o),
	}
	o.AddFlags(cmd.Flags())
	f.RegisterCompletions(cmd)
	return cmd
}

// Complete builds the clients (Validate has read the configuration).
func (o *Options) Complete(ctx context.Context) error {
	return o.Factory.Complete(ctx)
}

// Run starts the service and returns when ctx is done or the manager
// fails. It makes the start checks first and starts nothing when one
// fails.
func (o *Options) Run(ctx context.Context) error {
	setupLog := ctrl.Log.WithName("setup")
	cfg, rc := o.Config, o.RESTConfig
	identity, err := whoAmI(ctx, o.KubeClient)
	if err != nil {
		return err
	}
	// Entries are signed by the identity and, for a named instance, the
	// instance: two installations never judge each other's circuits, even
	// under one ServiceAccount.
	signer := startcheck.Signer(identity, cfg.Instance)
	opts := admission.Options{BreakerUsername: identity, Managed: cfg.Managed(circuit.KindMutating), ManagedValidating: cfg.Managed(circuit.KindValidating), Instance: cfg.Instance}
	if err := startcheck.Run(logf.IntoContext(ctx, setupLog), o.Client, o.KubeClient, cfg, opts); err != nil {
		return err
	}
	// Advice, not a check: bounded, in its own goroutine, never failing the start.
	go startcheck.WarnInterceptors(logf.IntoContext(ctx, setupLog), o.Client,
		startcheck.Interception{Namespace: o.LeaderElectionNamespace, LeaderElection: o.LeaderElect, Config: cfg})
	setupLog.Info("Starting webhook-guard", "version", o.Build.Version, "identity", identity, "targets", len(cfg.Targets))
	if len(cfg.Targets) == 0 {
		setupLog.Info("No target: the guard runs idle, probing and changing nothing, until a webhook is approved in its configuration")
	}

	// Marking what is admitted without a mutating webhook needs
	// MutatingAdmissionPolicy (GA in 1.36). Asked before the manager is
	// built: its cache cannot be told how to keep a kind the apiserver
	// does not serve.
	discoverCtx, cancel := context.WithTimeout(ctx, whoAmITimeout)
	markingProblem, err := markingUnavailable(discoverCtx, o.KubeClient.Discovery())
	cancel()
	if err != nil {
		return err
	}

	var webhookServer webhook.Server
	if o.WebhookCertDir != "" {
		webhookServer = webhook.NewServer(webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.WebhookCertDir, TLSOpts: serverTLSOpts})
	}
	// The Lease's lock, as the manager would build it, on the Lease's own
	// connection, and waiting for an earlier release's leader when the
	// Lease has moved (handoverLock).
	var lock resourcelock.Interface
	if o.LeaderElect {
		var stopLeaseEvents func()
		lock, stopLeaseEvents, err = newLeaseLock(leaseConfig(rc), o.KubeClient, identity, leaderelection.Options{
			LeaderElection: true, LeaderElectionNamespace: o.LeaderElectionNamespace,
			LeaderElectionID: status.LeaseName(cfg.Instance), RenewDeadline: o.RenewDeadline,
		}, settleTime(o.RetryPeriod))
		if err != nil {
			return fmt.Errorf("building the leader-election lock: %w", err)
		}
		defer stopLeaseEvents()
	}
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Scheme: factory.Scheme,
		Metrics: metricsserver.Options{
			BindAddress:    o.MetricsAddr,
			SecureServing:  true,
			FilterProvider: status.WithCredentials(filters.WithAuthenticationAndAuthorization), // and GET /status
			TLSOpts:        serverTLSOpts,
			// Empty: controller-runtime's default folder
			// (<tmp>/k8s-metrics-server/serving-certs), empty in the
			// image, so a self-signed certificate. A folder that is set
			// must hold a pair (checkMetricsCert).
			CertDir: o.MetricsCertDir,
		},
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		WebhookServer:                 webhookServer,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              status.LeaseName(cfg.Instance),
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Its namespace and ID above are what the lock was built with;
		// the manager takes them for its logs.
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &o.LeaseDuration,
		RenewDeadline:                       &o.RenewDeadline,
		RetryPeriod:                         &o.RetryPeriod,
		GracefulShutdownTimeout:             &o.GracefulShutdown,
		Controller:                          ctrlConfig(),
		// Nothing reads the managedFields of webhook configurations from
		// the cache; without them every copy a probe or a reconcile makes
		// is smaller.
		Cache: cache.Options{ByObject: cacheByObject(markingProblem == "")},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	m, policyInForce, err := registerMetrics(metrics.Registry, cfg.Targets, o.Build, mgr.GetCache())
	if err != nil {
		return err
	}

	if err := setupCerts(ctx, mgr, o.Client, o.WebhookCertDir, o.Certs); err != nil {
		return err
	}
	if o.MetricsAddr != "0" {
		if err := checkMetricsCert(o.MetricsCertDir); err != nil {
			return err
		}
	}

	recorder, stopEvents, err := newRecorder(ctx, o.KubeClient)
	if err != nil {
		return err
	}
	defer stopEvents()
	// The installer applies the guard policy; the guard only checks it.
	policy := &admission.PolicyChecker{Reader: mgr.GetClient(), Options: opts, Recorder: recorder, InForce: policyInForce}
	if err := policy.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the guard policy check: %w", err)
	}
	if webhookServer != nil {
		// GetWebhookServer adds the server to the manager; a server that is
		// only passed in Options is never started.
		mgr.GetWebhookServer().Register(admission.WebhookPath, &webhookadmission.Webhook{Handler: &admission.Handler{Options: opts}})
	}

	reader := mgr.GetAPIReader()
	state := breaker.NewState()
	state.HoldWhenAllFail = cfg.HoldWhenAllFail
	triggers := map[circuit.Kind]chan<- event.GenericEvent{}
	// Where the apiserver does not serve MutatingAdmissionPolicy, the
	// breaker runs without marking and says so once.
	clientset := o.KubeClient
	var marker *marking.Keeper
	if markingProblem != "" {
		setupLog.Info("Marking unavailable", "reason", markingProblem)
		m.MarkingAvailable.Set(0)
	} else {
		marker = &marking.Keeper{Reader: mgr.GetClient(), Canary: clientset.CoreV1().Events(marking.CanaryNamespace)}
		m.MarkingAvailable.Set(1)
	}
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		// Every kind gets a controller, targets or not: a record left by a
		// removed target must still be closed.
		trigger := make(chan event.GenericEvent, len(cfg.Targets))
		triggers[kind] = trigger
		targets := &breaker.ConfigurationReconciler{
			Kind: kind, Client: mgr.GetClient(), Targets: cfg.Targets,
			State: state, Recorder: recorder, Metrics: m, Signer: signer,
		}
		if kind == circuit.KindMutating {
			targets.Marker = marker
		}
		if err := targets.SetupWithManager(mgr, trigger); err != nil {
			return fmt.Errorf("setting up the breaker controller for %s: %w", kind.Resource(), err)
		}
	}
	// The guard's own stalls (CPU throttling, starvation): a probe that
	// timed out while the guard did not run counts for nothing.
	stalls := &probe.StallMonitor{}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { stalls.Run(ctx); return nil })); err != nil {
		return err
	}
	// Services are resolved from watches, started on first use and
	// stopped with the manager: once resolved, a probe never waits on an
	// apiserver request that an outage slows down.
	services := probe.NewWatchingResolver(clientset)
	if err := mgr.Add(services); err != nil {
		return fmt.Errorf("adding the Service resolver: %w", err)
	}
	// Every replica watches the targets' Services and configurations
	// before it leads, so that a new leader's first probes wait on no
	// list from an apiserver the outage may be slowing down.
	if err := mgr.Add(&breaker.ServiceWarmer{Reader: mgr.GetCache(), Targets: cfg.Targets, Services: services}); err != nil {
		return fmt.Errorf("adding the Service warmer: %w", err)
	}
	runner := &breaker.ProbeRunner{
		// The latency histograms tell calls answered within the probe's
		// timeout, for traffic that stands in for the probe.
		Scraper: &apimetrics.Scraper{Client: clientset.Discovery().RESTClient(), Latency: breaker.TrafficAsProbe(cfg.Targets)},
		// kube-apiserver's own road to service-backed webhooks, through its
		// service proxy: it confirms the apiserver signal before it opens.
		PathProber:     &probe.PathProber{Client: clientset.CoreV1().RESTClient()},
		ScrapeInterval: cfg.APIServerScrapeInterval,
		Reader:         mgr.GetClient(), Targets: cfg.Targets, State: state, Metrics: m, Recorder: recorder, Triggers: triggers, Signer: signer,
		Prober: &probe.Prober{Resolver: services, Discovery: clientset.Discovery(), Username: identity, Stalls: stalls,
			// HTTPGet probes keep their connections between probes and
			// re-dial every probe.DefaultRedial; AdmissionReview probes use
			// kube-apiserver's own webhook clients, which keep theirs.
			Pool: &probe.ConnectionPool{},
			// Open circuits' probes of hanging webhooks lose their
			// connections at each timeout; their new ones are budgeted.
			RecoveryDials: rate.NewLimiter(probe.RecoveryDialsPerSecond, probe.RecoveryDialsPerSecond)},
		DiagnoseTLS: func(ctx context.Context, annotations map[string]string) string {
			return certs.DiagnoseInjectedCA(ctx, reader, annotations, time.Now())
		},
	}
	if err := mgr.Add(runner); err != nil {
		return fmt.Errorf("adding the probe runner: %w", err)
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("guard-policy", func(req *http.Request) error {
		return admission.PolicyEnforced(req.Context(), reader, opts)
	}); err != nil {
		return err
	}
	if webhookServer != nil {
		if err := mgr.AddReadyzCheck("webhook", webhookServer.StartedChecker()); err != nil {
			return err
		}
	}
	if markingProblem != "" {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			reportMarkingUnavailable(ctx, mgr.GetClient(), recorder, cfg, markingProblem)
			return nil
		})); err != nil {
			return err
		}
	}
	statusServer := &status.Server{Addr: o.StatusAddr, Config: cfg, State: state, Marking: markingProblem}
	if o.MetricsAddr != "0" {
		// "guard status" reads it here, authenticated and authorized.
		if err := mgr.AddMetricsServerExtraHandler(status.Path, statusServer); err != nil {
			return fmt.Errorf("serving %s on the metrics endpoint: %w", status.Path, err)
		}
	}
	if o.StatusAddr != "0" {
		if err := mgr.Add(statusServer); err != nil {
			return err
		}
	}

	setupLog.Info("Starting the manager")
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// reportMarkingUnavailable emits one Event on each mutating target's
// configuration: marking is unavailable on this apiserver.
func reportMarkingUnavailable(ctx context.Context, c client.Reader, rec recorder.EventRecorder, cfg *config.Configuration, problem string) {
	for _, name := range cfg.Names(circuit.KindMutating) {
		obj := circuit.KindMutating.New()
		if err := c.Get(ctx, client.ObjectKey{Name: name}, obj); err == nil {
			rec.Eventf(obj, nil, corev1.EventTypeWarning, "MarkingUnavailable", "Probe", "%s", circuit.EventNote("%s", problem))
		}
	}
}

// whoAmI asks the apiserver who this process is, with a SelfSubjectReview.
// The answer is the identity the guard exempts; no flag can claim it.
func whoAmI(ctx context.Context, cs kubernetes.Interface) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, whoAmITimeout)
	defer cancel()
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("finding this process's identity with a SelfSubjectReview: %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the SelfSubjectReview returned no username")
	}
	return review.Status.UserInfo.Username, nil
}

// serverTLSOpts harden the webhook and metrics servers: HTTP/1.1 only,
// which controller-runtime advises against HTTP/2 rapid reset
// (CVE-2023-44487) and kube-apiserver does not need, and TLS 1.2 or later.
var serverTLSOpts = []func(*tls.Config){
	func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} },
	func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 },
}

// leaseConfig is the REST configuration of the Lease renewals: rc on a
// connection of its own. Without it client-go's transport cache gives the
// renewals the manager's HTTP/2 connection, where a renewal waits behind
// the frames of a thousand patches and Events when many circuits open at
// once. A Dial of its own makes client-go build a new transport
// (its cache keys transports by dialer); the dialer is client-go's
// default one.
func leaseConfig(rc *rest.Config) *rest.Config {
	lc := rest.CopyConfig(rc)
	lc.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return lc
}

func ctrlConfig() ctrlconfig.Controller { return ctrlconfig.Controller{RecoverPanic: ptr.To(true)} }

// markingUnavailable says why objects admitted while a circuit is open
// cannot be marked ("" when they can): the apiserver does not serve
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy and its binding.
// An error is one from discovery itself, not a missing group version.
func markingUnavailable(ctx context.Context, d discovery.ServerResourcesInterfaceWithContext) (string, error) {
	gv := admissionregistrationv1.SchemeGroupVersion.String()
	list, err := d.ServerResourcesForGroupVersionWithContext(ctx, gv)
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("the apiserver does not serve %s: objects admitted while a circuit is open are not marked", gv), nil
	}
	if err != nil {
		return "", fmt.Errorf("discovering %s: %w", gv, err)
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Kind] = true
	}
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		if !served[kind] {
			return fmt.Sprintf("the apiserver does not serve %s %s: objects admitted while a circuit is open are not marked", gv, kind), nil
		}
	}
	return "", nil
}

// cacheByObject is how the manager's cache keeps what the service reads:
// webhook configurations without managedFields (nothing reads them), and,
// when marking is available, marking policies as their metadata and a
// digest of their spec (what the Keeper compares), not the spec itself.
func cacheByObject(withMarking bool) map[client.Object]cache.ByObject {
	by := map[client.Object]cache.ByObject{
		&admissionregistrationv1.MutatingWebhookConfiguration{}:   {Transform: cache.TransformStripManagedFields()},
		&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Transform: cache.TransformStripManagedFields()},
	}
	if withMarking {
		by[&admissionregistrationv1.MutatingAdmissionPolicy{}] = cache.ByObject{Transform: marking.CacheTransform}
		by[&admissionregistrationv1.MutatingAdmissionPolicyBinding{}] = cache.ByObject{Transform: marking.CacheTransform}
	}
	return by
}

// newRecorder is the guard's events.k8s.io recorder, as the manager's
// would be (each Event is also logged at debug level, under "events"). Its
// Events are events.k8s.io Events, which the marking policies leave out
// before any of their CEL runs, and those about cluster-scoped objects
// are in circuit.EventsNamespace (clusterEventsSink). stop flushes and
// stops it.
func newRecorder(ctx context.Context, cs kubernetes.Interface) (rec recorder.EventRecorder, stop func(), err error) {
	log := ctrl.Log.WithName("events")
	broadcaster := events.NewBroadcaster(clusterEventsSink{&events.EventSinkImpl{Interface: cs.EventsV1()}})
	if err := broadcaster.StartRecordingToSinkWithContext(logf.IntoContext(ctx, log)); err != nil {
		return nil, nil, fmt.Errorf("starting the events recorder: %w", err)
	}
	stopLogging, err := broadcaster.StartLogging(log.V(1))
	if err != nil {
		broadcaster.Shutdown()
		return nil, nil, fmt.Errorf("starting the events log: %w", err)
	}
	stop = func() {
		stopLogging()
		broadcaster.Shutdown()
	}
	rec, ok := broadcaster.NewRecorder(factory.Scheme, circuit.ReportingController).(recorder.EventRecorder)
	if !ok {
		stop()
		return nil, nil, errors.New("client-go's events recorder does not record annotated Events")
	}
	return rec, stop, nil
}

// clusterEventsSink writes an Event about a cluster-scoped object (the
// webhook configurations, the guard policy) in circuit.EventsNamespace,
// where client-go's recorder puts it in default: a policy engine's */*
// webhook intercepts default, and while it hangs it would lose every
// Event of the outage, the HandedOff Event that keeps a handed-off
// circuit's original failurePolicy among them. Events about namespaced
// objects stay with them.
type clusterEventsSink struct{ events.EventSink }

func (s clusterEventsSink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return s.EventSink.Create(ctx, inEventsNamespace(ev))
}

func (s clusterEventsSink) Update(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return s.EventSink.Update(ctx, inEventsNamespace(ev))
}

func (s clusterEventsSink) Patch(ctx context.Context, ev *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.EventSink.Patch(ctx, inEventsNamespace(ev), data)
}

// inEventsNamespace returns ev, or a copy of it in circuit.EventsNamespace
// when it is about a cluster-scoped object.
func inEventsNamespace(ev *eventsv1.Event) *eventsv1.Event {
	if ev.Regarding.Namespace != "" || ev.Namespace == circuit.EventsNamespace {
		return ev
	}
	out := ev.DeepCopy()
	out.Namespace = circuit.EventsNamespace
	return out
}
