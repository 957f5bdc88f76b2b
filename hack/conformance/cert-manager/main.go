// Command cert-manager-webhook runs cert-manager's real admission chain
// (internal/webhook.NewCertManagerWebhookServer: the CertificateRequest
// identity and approval plugins and resource validation, behind
// cert-manager's own /mutate and /validate handlers) for webhook-guard's
// conformance tests (test/e2e/conformance).
//
// It lives in a module whose path is under github.com/cert-manager/cert-manager
// so that Go's internal-package rule lets it import cert-manager's internal
// packages; cert-manager's own cmd/webhook is a separate module that is not
// needed here. The flags are named as cert-manager's webhook names them.
//
// One deliberate difference from cert-manager's server.Run: it listens on
// --listen-host (127.0.0.1 by default) instead of every interface, and
// starts no healthz, metrics or pprof listener. The handlers registered
// and the admission chain behind them are exactly Run's.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	config "github.com/cert-manager/cert-manager/internal/apis/config/webhook"
	cmwebhook "github.com/cert-manager/cert-manager/internal/webhook"
	servertls "github.com/cert-manager/cert-manager/pkg/server/tls"
	cmadmission "github.com/cert-manager/cert-manager/pkg/webhook/admission"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
	ciphers "k8s.io/component-base/cli/flag"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

func main() {
	var opts config.WebhookConfiguration
	var host string
	var port int
	// A FlagSet of its own: controller-runtime registers --kubeconfig on
	// the global one.
	fs := flag.NewFlagSet("cert-manager-webhook", flag.ExitOnError)
	fs.StringVar(&host, "listen-host", "127.0.0.1", "Address to listen on for TLS connections from kube-apiserver.")
	fs.IntVar(&port, "secure-port", 6443, "Port to listen on for TLS connections from kube-apiserver.")
	fs.StringVar(&opts.TLSConfig.Filesystem.CertFile, "tls-cert-file", "", "Path to a file containing the TLS certificate (and chain) to serve with.")
	fs.StringVar(&opts.TLSConfig.Filesystem.KeyFile, "tls-private-key-file", "", "Path to a file containing the TLS private key to serve with.")
	fs.StringVar(&opts.KubeConfig, "kubeconfig", "", "kubeconfig for the apiserver (SubjectAccessReviews and discovery of the approval plugin).")
	_ = fs.Parse(os.Args[1:])
	if opts.TLSConfig.Filesystem.CertFile == "" || opts.TLSConfig.Filesystem.KeyFile == "" || opts.KubeConfig == "" {
		fmt.Fprintln(os.Stderr, "cert-manager-webhook: --tls-cert-file, --tls-private-key-file and --kubeconfig are required")
		os.Exit(2)
	}
	opts.SecurePort = int32(port)
	opts.MetricsListenAddress = "0"

	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: 1})
	ctrl.SetLogger(log)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, log, host, opts); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-webhook:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log logr.Logger, host string, opts config.WebhookConfiguration) error {
	srv, err := cmwebhook.NewCertManagerWebhookServer(log, opts)
	if err != nil {
		return err
	}
	certs, ok := srv.CertificateSource.(*servertls.FileCertificateSource)
	if !ok {
		return fmt.Errorf("want a file certificate source, got %T", srv.CertificateSource)
	}
	cipherSuites, err := ciphers.TLSCipherSuites(srv.CipherSuites)
	if err != nil {
		return err
	}
	minVersion, err := ciphers.TLSVersion(srv.MinTLSVersion)
	if err != nil {
		return err
	}

	// What server.Run does, on host only.
	mgr, err := ctrl.NewManager(&rest.Config{}, ctrl.Options{
		Scheme:         srv.ResourceScheme,
		Logger:         log,
		LeaderElection: false,
		Metrics:        metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: host,
			Port: srv.ListenAddr,
			TLSOpts: []func(*tls.Config){func(cfg *tls.Config) {
				cfg.CipherSuites = cipherSuites
				cfg.MinVersion = minVersion
				cfg.GetCertificate = certs.GetCertificate
			}},
		}),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.Add(certs); err != nil {
		return err
	}
	mgr.GetWebhookServer().Register("/mutate", cmadmission.NewCustomMutationWebhook(srv.MutationWebhook))
	mgr.GetWebhookServer().Register("/validate", cmadmission.NewCustomValidationWebhook(mgr.GetScheme(), srv.ValidationWebhook))
	return mgr.Start(ctx)
}
