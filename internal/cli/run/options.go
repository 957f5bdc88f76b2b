package run

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/cli/version"
)

// Options are the flags and inputs of "guard run". Defaults are applied
// in AddFlags, the only place they are set.
type Options struct {
	// Factory owns --config (the GuardConfiguration file, required),
	// kubectl's connection flags (no -n: the service needs no
	// installation to find), and builds the clients.
	*factory.Factory
	cli.IOStreams
	// Build is the binary's version and commit, logged at start and
	// exported as webhook_guard_build_info.
	Build version.Build

	// MetricsAddr serves metrics over HTTPS with authentication and
	// authorization (--metrics-bind-address). Default "0": off.
	MetricsAddr string
	// MetricsCertDir holds tls.crt and tls.key for the metrics endpoint
	// (--metrics-cert-dir), so that a scraper can verify it against a CA:
	// a cert-manager Secret, or WebhookCertDir where the service keeps its
	// own certificate. Both files must be there when the manager starts.
	// Default empty: a self-signed certificate that controller-runtime
	// generates at each start, which no CA verifies.
	MetricsCertDir string
	// PprofAddr serves net/http/pprof, for profiling (--pprof-bind-address).
	// Default "0": off.
	PprofAddr string
	// ProbeAddr serves /healthz and /readyz (--health-probe-bind-address).
	// Default ":8081".
	ProbeAddr string
	// LeaderElect enables leader election on a Lease (--leader-elect).
	// Default false; the deployment turns it on.
	LeaderElect bool
	// LeaderElectionNamespace holds the Lease (--leader-election-namespace).
	// Default webhook-guard-system.
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election
	// (--leader-election-lease-duration, --leader-election-renew-deadline,
	// --leader-election-retry-period). Defaults 15s, 10s, 2s: a crashed
	// leader is replaced within about LeaseDuration.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// WebhookPort serves the guard's admission webhook for static admission
	// (--webhook-port), when WebhookCertDir is set. Default 9443.
	WebhookPort int
	// WebhookCertDir holds tls.crt and tls.key for the webhook
	// (--webhook-cert-dir). Default empty: the webhook server is off, and
	// so are its readiness check and the certificate management of Certs.
	// Only static admission calls the webhook; the default installation
	// leaves it off.
	WebhookCertDir string
	// WebhookHost is the address the webhook listens on (--webhook-host).
	// Default empty: all addresses.
	WebhookHost string
	// StatusAddr serves GET /status, the leader's per-target probe counts as
	// JSON, without authentication, for a guard run by hand
	// (--status-bind-address). Only a loopback address is accepted. Default
	// "127.0.0.1:8082"; "0" turns it off. The Deployment turns it off:
	// "guard status" reads /status from the metrics server, which
	// authenticates and authorizes it (internal/status).
	StatusAddr string
	// Certs manage the webhook's serving certificate when WebhookCertDir is
	// set; see CertOptions.
	Certs CertOptions
	// GracefulShutdown bounds shutdown, including releasing the Lease
	// (--graceful-shutdown-timeout). Default 10s.
	GracefulShutdown time.Duration
	// Zap configures the log (--zap-log-level, --zap-devel and the other
	// flags of controller-runtime's zap.Options). Default: production
	// JSON at info level.
	Zap zap.Options
}

// AddFlags adds the flags of "guard run" to fs, with their defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.AddConfigFlag(fs, "GuardConfiguration file (required).")
	o.AddKubeconfigFlags(fs)
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", "0", "Address of the HTTPS metrics endpoint (authenticated and authorized); \"0\" turns it off.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "Folder with tls.crt and tls.key for the metrics endpoint (a cert-manager Secret, or --webhook-cert-dir); empty: a self-signed certificate generated at each start.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "0", "Address of net/http/pprof (unauthenticated: bind it to loopback); \"0\" turns it off.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "Elect a leader on a Lease; only the leader probes and writes.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", circuit.DefaultNamespace, "Namespace of the leader-election Lease.")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a Lease is valid without renewal; a crashed leader is replaced after it.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew before it steps down.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", 2*time.Second, "How often candidates try to acquire or renew the Lease.")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "Port of the guard's admission webhook (for static admission).")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "", "Folder with tls.crt and tls.key for the webhook; empty turns the webhook server off.")
	fs.StringVar(&o.WebhookHost, "webhook-host", "", "Address the webhook listens on; empty means all.")
	o.StatusAddr = "127.0.0.1:8082"
	fs.Var((*loopbackAddr)(&o.StatusAddr), "status-bind-address", "Loopback `host:port` of an unauthenticated GET /status (probe counts as JSON, for a guard run by hand); \"0\" turns it off. The metrics endpoint serves /status with authentication.")
	fs.DurationVar(&o.GracefulShutdown, "graceful-shutdown-timeout", 10*time.Second, "How long shutdown may take.")
	o.Certs.AddFlags(fs)
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	o.Zap.BindFlags(zapFlags)
	fs.AddGoFlagSet(zapFlags)
}

// Validate checks the flags, reads the configuration file and binds, and
// releases at once, every address the service will serve on, before
// anything reaches the cluster.
func (o *Options) Validate() error {
	if o.ConfigPath == "" {
		return cli.UsageError{Err: errors.New("--config is required")}
	}
	if err := o.ReadConfigFile(); err != nil {
		return err
	}
	return checkPorts(o)
}

// loopbackAddr is a host:port flag that refuses any host but a loopback
// address ("localhost", 127.0.0.0/8, ::1), or "0" for off: what it serves
// is unauthenticated, so nothing outside the machine (or the pod) may
// reach it.
type loopbackAddr string

var _ pflag.Value = (*loopbackAddr)(nil)

func (a *loopbackAddr) String() string { return string(*a) }

// Type names the value in help.
func (a *loopbackAddr) Type() string { return "host:port" }

// Set accepts "0" or a loopback host:port.
func (a *loopbackAddr) Set(v string) error {
	if v != "0" {
		host, _, err := net.SplitHostPort(v)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("%q is not a loopback address: this endpoint is unauthenticated; bind it to 127.0.0.1, or read /status from the metrics endpoint, which authenticates", host)
		}
	}
	*a = loopbackAddr(v)
	return nil
}

// checkPorts binds, and releases at once, every address the service will
// serve on, so that a port in use fails the start before anything else
// happens, naming the flag and the address (the servers start only after
// the caches sync, and would report it last).
func checkPorts(o *Options) error {
	addrs := []struct{ flag, addr string }{
		{"--metrics-bind-address", o.MetricsAddr},
		{"--pprof-bind-address", o.PprofAddr},
		{"--health-probe-bind-address", o.ProbeAddr},
		{"--status-bind-address", o.StatusAddr},
	}
	if o.WebhookCertDir != "" {
		addrs = append(addrs, struct{ flag, addr string }{"--webhook-port", net.JoinHostPort(o.WebhookHost, strconv.Itoa(o.WebhookPort))})
	}
	for _, a := range addrs {
		if a.addr == "" || a.addr == "0" {
			continue
		}
		l, err := net.Listen("tcp", a.addr)
		if err != nil {
			return fmt.Errorf("%s %s: cannot listen: %w", a.flag, a.addr, err)
		}
		_ = l.Close()
	}
	return nil
}
