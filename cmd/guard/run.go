package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	webhookadmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/certs"
	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// LeaderElectionID names the Lease. Keep it stable across versions so
// that an upgrade hands over to the new leader.
const LeaderElectionID = "webhook-guard.webhook-guard.io"

func runCommand(ctx context.Context, args []string, stderr io.Writer, restConfig func() (*rest.Config, error)) error {
	var o runOptions
	fs := newRunFlags(&o)
	fs.SetOutput(stderr)
	zo := zap.Options{}
	zo.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo), zap.WriteTo(stderr)))
	if o.ConfigPath == "" {
		return usageError{errors.New("run: --config is required")}
	}
	// The configuration is validated before anything touches the cluster.
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		return err
	}
	if err := checkPorts(o); err != nil {
		return err
	}
	rc, err := restConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	return serve(ctx, o, cfg, rc)
}

func serve(ctx context.Context, o runOptions, cfg *config.Configuration, rc *rest.Config) error {
	identity, err := whoAmI(ctx, rc)
	if err != nil {
		return err
	}
	if err := checkTargetPermissions(ctx, rc, cfg); err != nil {
		return err
	}
	if err := checkTargetRules(ctx, rc, cfg); err != nil {
		return err
	}
	// Entries are signed by the identity and, for a named instance, the
	// instance: two installations never judge each other's circuits, even
	// under one ServiceAccount.
	signer := identity
	if cfg.Instance != "" {
		signer = identity + "/" + cfg.Instance
	}
	opts := admission.Options{BreakerUsername: identity, Managed: cfg.Managed(circuit.KindMutating), ManagedValidating: cfg.Managed(circuit.KindValidating), Instance: cfg.Instance}
	if err := checkOtherInstances(ctx, rc, cfg, opts); err != nil {
		return err
	}
	if err := checkOrphanedRecords(ctx, rc, cfg, signer); err != nil {
		return err
	}
	if err := checkMarkingPolicies(ctx, rc, cfg); err != nil {
		return err
	}
	setupLog.Info("Starting webhook-guard", "version", version, "identity", identity, "targets", len(cfg.Targets))

	m := breaker.NewMetrics()
	repairs := admission.NewPolicyRepairs()
	// Every counter series the alerts take increase() or rate() of exists
	// at 0 from the start, so that the first event after a start is seen.
	m.Initialize(cfg.Targets)
	admission.InitializePolicyRepairs(repairs)
	for _, c := range append(m.Collectors(), repairs, breaker.NewBuildInfo(version, commit, runtime.Version())) {
		if err := metrics.Registry.Register(c); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}

	var webhookServer webhook.Server
	if o.WebhookCertDir != "" {
		webhookServer = webhook.NewServer(webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.WebhookCertDir, TLSOpts: serverTLSOpts})
	}
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Scheme: scheme,
		Metrics: metricsserver.Options{
			BindAddress:    o.MetricsAddr,
			SecureServing:  true,
			FilterProvider: withStatusCredentials(filters.WithAuthenticationAndAuthorization), // and GET /status
			TLSOpts:        serverTLSOpts,
		},
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		WebhookServer:                 webhookServer,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              leaderElectionID(cfg.Instance),
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.LeaseDuration,
		RenewDeadline:                 &o.RenewDeadline,
		RetryPeriod:                   &o.RetryPeriod,
		GracefulShutdownTimeout:       &o.GracefulShutdown,
		Controller:                    ctrlConfig(),
		// Nothing reads the managedFields of webhook configurations from
		// the cache; without them every copy a probe or a reconcile makes
		// is smaller (marking policies keep theirs: the Keeper reads them).
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&admissionregistrationv1.MutatingWebhookConfiguration{}:   {Transform: cache.TransformStripManagedFields()},
			&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Transform: cache.TransformStripManagedFields()},
		}},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	// The timeouts of every webhook in the cluster, from the cache, for the
	// alert on kube-apiserver's latency of any webhook.
	if err := metrics.Registry.Register(&breaker.WebhookTimeouts{Reader: mgr.GetCache()}); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}

	if err := setupCerts(ctx, mgr, nil, o.WebhookCertDir, o.Certs); err != nil {
		return err
	}

	policy := &admission.PolicyReconciler{Client: mgr.GetClient(), Options: opts, Recorder: mgr.GetEventRecorder("webhook-guard"), Repairs: repairs}
	if err := policy.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the guard policy controller: %w", err)
	}
	if webhookServer != nil {
		// GetWebhookServer adds the server to the manager; a server that is
		// only passed in Options is never started.
		mgr.GetWebhookServer().Register(admission.WebhookPath, &webhookadmission.Webhook{Handler: &admission.Handler{Options: opts}})
	}

	reader := mgr.GetAPIReader()
	state := breaker.NewState()
	state.HoldWhenAllFail = cfg.HoldWhenAllFail
	recorder := mgr.GetEventRecorder("webhook-guard")
	triggers := map[circuit.Kind]chan<- event.GenericEvent{}
	// Marking what is admitted without a mutating webhook needs
	// MutatingAdmissionPolicy (GA in 1.36). Where the apiserver does not
	// serve it, the breaker works as before and says so once.
	clientset, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	var marker *marking.Keeper
	markingProblem := ""
	if _, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: "MutatingAdmissionPolicy"}, "v1"); err != nil {
		markingProblem = fmt.Sprintf("the apiserver does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (%v): objects admitted while a circuit is open are not marked", err)
		setupLog.Info("Marking unavailable", "reason", markingProblem)
		m.MarkingAvailable.Set(0)
	} else {
		marker = &marking.Keeper{Reader: mgr.GetClient(), Canary: clientset.EventsV1().Events(marking.CanaryNamespace)}
		m.MarkingAvailable.Set(1)
	}
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		// Every kind gets a controller, targets or not: a record left by a
		// removed target must still be closed.
		trigger := make(chan event.GenericEvent, len(cfg.Targets))
		triggers[kind] = trigger
		targets := &breaker.TargetReconciler{
			Kind: kind, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Targets: cfg.Targets,
			State: state, Recorder: recorder, Metrics: m, Identity: signer,
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
	runner := &breaker.ProbeRunner{
		Scraper: &apimetrics.Scraper{Client: clientset.Discovery().RESTClient()},
		// kube-apiserver's own road to service-backed webhooks, through its
		// service proxy: it confirms the apiserver signal before it opens.
		PathProber: &probe.PathProber{Client: clientset.CoreV1().RESTClient()},
		Reader:     mgr.GetClient(), Targets: cfg.Targets, State: state, Metrics: m, Recorder: recorder, Triggers: triggers, Identity: signer,
		Prober: &probe.Prober{Resolver: &probe.CachingResolver{Next: probe.NewServiceResolver(mgr.GetAPIReader())}, Discovery: clientset.Discovery(), Username: identity, Stalls: stalls,
			// HTTPGet probes keep their connections between probes and
			// re-dial every probe.DefaultRedial; AdmissionReview probes use
			// kube-apiserver's own webhook clients, which keep theirs.
			Pool: &probe.ConnectionPool{}},
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
	status := &statusServer{addr: o.StatusAddr, cfg: cfg, state: state, marking: markingProblem}
	if o.MetricsAddr != "0" {
		// "guard status" reads it here, authenticated and authorized.
		if err := mgr.AddMetricsServerExtraHandler(statusPath, status); err != nil {
			return fmt.Errorf("serving %s on the metrics endpoint: %w", statusPath, err)
		}
	}
	if o.StatusAddr != "0" {
		if err := mgr.Add(status); err != nil {
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

// leaderElectionID is LeaderElectionID, prefixed by a named instance.
func leaderElectionID(instance string) string {
	if instance == "" {
		return LeaderElectionID
	}
	return instance + "." + LeaderElectionID
}

// whoAmI asks the apiserver who this process is, with a SelfSubjectReview.
// The answer is the identity the guard exempts; no flag can claim it.
func whoAmI(ctx context.Context, rc *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
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

func ctrlConfig() ctrlconfig.Controller { return ctrlconfig.Controller{RecoverPanic: ptr.To(true)} }
