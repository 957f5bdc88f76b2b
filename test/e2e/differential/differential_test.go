package differential

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/probe"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// hookKind is the kind of webhook configuration a row uses.
type hookKind string

const (
	mutating   hookKind = "mutating"
	validating hookKind = "validating"
)

// The apiserver's verdicts on a ConfigMap create.
const (
	verdictAdmitted = "admitted"
	// verdictDenied is a rejection that is not a calling error: the
	// webhook's allowed: false, or an error of the apiserver's own such
	// as a patch that decodes but does not apply.
	verdictDenied = "denied"
	// verdictFailedCalling is kube-apiserver's "failed calling webhook":
	// the errors failurePolicy governs (webhookutil.ErrCallingWebhook).
	verdictFailedCalling = "failed calling webhook"
)

// row is one variant sent to one kind of webhook.
type row struct {
	v    variant
	kind hookKind

	apiserver, apiserverDetail string
	probe                      probe.Result
}

func (r *row) namespace() string     { return fmt.Sprintf("dv-%s-%s", r.v.name, r.kind[:1]) }
func (r *row) configuration() string { return fmt.Sprintf("differential-%s-%s", r.v.name, r.kind) }
func (r *row) webhookName() string {
	return fmt.Sprintf("%s.%s.differential.webhook-guard.io", r.v.name, r.kind)
}
func (r *row) path() string { return fmt.Sprintf("/%s/%s", r.v.name, r.kind) }

// agree is the contract: the probe fails exactly when kube-apiserver
// fails calling the webhook, and is healthy when the apiserver admits or
// denies. An Unknown probe agrees with nothing.
func (r *row) agree() bool {
	switch r.probe.Outcome {
	case probe.OutcomeFailed:
		return r.apiserver == verdictFailedCalling
	case probe.OutcomeHealthy:
		return r.apiserver == verdictAdmitted || r.apiserver == verdictDenied
	}
	return false
}

func (r *row) probeVerdict() string {
	if r.probe.Outcome == probe.OutcomeFailed {
		return fmt.Sprintf("%s (%s)", r.probe.Outcome, r.probe.Reason)
	}
	return string(r.probe.Outcome)
}

// TestDifferential_probeAgreesWithTheAPIServer sends every variant, for a
// mutating and a validating webhook with failurePolicy Fail, through the
// real kube-apiserver (a ConfigMap create in the row's own namespace) and
// through the guard's real probe, and requires the same verdict on every
// row. It prints the whole table, so a failure shows every disagreement.
func TestDifferential_probeAgreesWithTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	srv, err := startVariantServer(variants())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	var rows []*row
	for _, v := range variants() {
		for _, k := range []hookKind{mutating, validating} {
			rows = append(rows, &row{v: v, kind: k})
		}
	}

	// Namespaces and configurations up front, in parallel.
	parallel(rows, 16, func(r *row) {
		if err := env.EnsureNamespace(ctx, r.namespace()); err != nil {
			t.Error(err)
			return
		}
		if err := createConfiguration(ctx, r, srv); err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		return
	}

	// The apiserver's warnings (the warnings variants) are not this
	// test's subject; keep them out of the log.
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	prober := newProber()

	start := time.Now()
	parallel(rows, 12, func(r *row) {
		if err := sendThroughAPIServer(ctx, cs, srv, r); err != nil {
			t.Error(err)
			return
		}
		wh, err := readBack(ctx, r)
		if err != nil {
			t.Error(err)
			return
		}
		r.probe = prober.Probe(ctx, wh, probe.Spec{Validating: r.kind == validating})
	})
	t.Logf("%d rows sent through kube-apiserver and probed in %s", len(rows), time.Since(start).Round(time.Millisecond))

	table := markdownTable(rows)
	t.Logf("\n%s", table)
	var details strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&details, "%s/%s:\n    kube-apiserver: %s: %s\n    probe: %s (HTTP %d, %s): %v\n",
			r.v.name, r.kind, r.apiserver, r.apiserverDetail, r.probeVerdict(), r.probe.HTTPStatus, r.probe.Duration.Round(time.Millisecond), r.probe.Err)
	}
	t.Logf("what each side said:\n%s", details.String())
	t.Logf("requests that followed a redirect to %s, by method: %v", redirectTarget, srv.Redirected())
	if out := os.Getenv("WEBHOOK_GUARD_VERDICTS_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}

	var disagreements []string
	for _, r := range rows {
		if r.apiserver != "" && !r.agree() {
			disagreements = append(disagreements, fmt.Sprintf("- %s/%s: kube-apiserver %s (%s); probe %s: %v",
				r.v.name, r.kind, r.apiserver, r.apiserverDetail, r.probeVerdict(), r.probe.Err))
		}
	}
	if len(disagreements) > 0 {
		t.Errorf("the probe disagrees with kube-apiserver on %d of %d rows:\n%s", len(disagreements), len(rows), strings.Join(disagreements, "\n"))
	}
}

// parallel runs f on every row, n at a time.
func parallel(rows []*row, n int, f func(*row)) {
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, r := range rows {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(r)
		}()
	}
	wg.Wait()
}

// webhookFor is the row's webhook in its mutating shape: failurePolicy
// Fail, sideEffects None, v1 reviews, a url clientConfig with the caBundle,
// CREATE of configmaps in the row's namespace only.
func webhookFor(r *row, srv *variantServer) admissionregistrationv1.MutatingWebhook {
	wh := harness.ConfigMapWebhook(r.webhookName(), r.namespace(), srv.URL(r.v, r.kind), srv.CA.CertPEM, admissionregistrationv1.Fail)
	timeout := r.v.timeoutSeconds
	if timeout == 0 {
		timeout = defaultTimeoutSeconds
	}
	wh.TimeoutSeconds = ptr.To(timeout)
	return wh
}

func createConfiguration(ctx context.Context, r *row, srv *variantServer) error {
	wh := webhookFor(r, srv)
	meta := metav1.ObjectMeta{Name: r.configuration()}
	var obj interface{ GetName() string }
	var err error
	if r.kind == mutating {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: meta, Webhooks: []admissionregistrationv1.MutatingWebhook{wh}}
		obj, err = mwc, env.Client.Create(ctx, mwc)
	} else {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: meta, Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    wh.Name,
			ClientConfig:            wh.ClientConfig,
			Rules:                   wh.Rules,
			FailurePolicy:           wh.FailurePolicy,
			NamespaceSelector:       wh.NamespaceSelector,
			SideEffects:             wh.SideEffects,
			TimeoutSeconds:          wh.TimeoutSeconds,
			AdmissionReviewVersions: wh.AdmissionReviewVersions,
		}}}
		obj, err = vwc, env.Client.Create(ctx, vwc)
	}
	if err != nil {
		return fmt.Errorf("creating the %s configuration %s: %w", r.kind, obj.GetName(), err)
	}
	return nil
}

// sendThroughAPIServer creates ConfigMaps in the row's namespace until one
// of them is judged by the row's webhook (the apiserver loads new
// configurations from an informer, so the first creates may not see it),
// and records the apiserver's verdict. A create is attributable to the
// webhook when the server counted a call from the apiserver on the row's
// path meanwhile, or when the apiserver's error names the webhook (a TLS
// failure never reaches the handler).
func sendThroughAPIServer(ctx context.Context, cs kubernetes.Interface, srv *variantServer, r *row) error {
	deadline := time.Now().Add(time.Minute)
	for attempt := 1; ; attempt++ {
		before := srv.APIServerCalls(r.path())
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "row-", Namespace: r.namespace(), Labels: map[string]string{
				"differential.webhook-guard.io/variant": r.v.name,
			}},
			Data: map[string]string{"variant": r.v.name},
		}
		created, err := cs.CoreV1().ConfigMaps(r.namespace()).Create(ctx, cm, metav1.CreateOptions{})
		called := srv.APIServerCalls(r.path()) > before
		named := err != nil && strings.Contains(err.Error(), fmt.Sprintf("%q", r.webhookName()))
		if called || named {
			switch {
			case err == nil:
				r.apiserver, r.apiserverDetail = verdictAdmitted, "created "+created.Name
				if created.Labels["differential.webhook-guard.io/patched"] == "yes" {
					r.apiserverDetail += ", with the webhook's patch applied"
				}
			case strings.Contains(err.Error(), fmt.Sprintf("failed calling webhook %q", r.webhookName())):
				r.apiserver, r.apiserverDetail = verdictFailedCalling, err.Error()
			default:
				r.apiserver, r.apiserverDetail = verdictDenied, err.Error()
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s/%s: after %d ConfigMap creates in a minute, none reached the webhook (last error: %v)", r.v.name, r.kind, attempt, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readBack reads the row's configuration from the apiserver and returns
// its webhook in the shape the probe takes (a validating one through
// circuit.View, as the breaker sees it).
func readBack(ctx context.Context, r *row) (admissionregistrationv1.MutatingWebhook, error) {
	var obj interface {
		GetName() string
	}
	var view *admissionregistrationv1.MutatingWebhookConfiguration
	var err error
	if r.kind == mutating {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err = env.Client.Get(ctx, clientKey(r.configuration()), mwc); err == nil {
			obj, view = mwc, mwc
		}
	} else {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err = env.Client.Get(ctx, clientKey(r.configuration()), vwc); err == nil {
			obj = vwc
			view, err = circuit.View(vwc)
		}
	}
	if err != nil {
		return admissionregistrationv1.MutatingWebhook{}, fmt.Errorf("reading back %s: %w", r.configuration(), err)
	}
	wh := harness.FindWebhook(view, r.webhookName())
	if wh == nil {
		return admissionregistrationv1.MutatingWebhook{}, fmt.Errorf("webhook %s is missing from %s", r.webhookName(), obj.GetName())
	}
	return *wh, nil
}

// markdownTable is the table of every row.
func markdownTable(rows []*row) string {
	var b strings.Builder
	b.WriteString("| Varies | Variant | What the webhook answers | Kind | kube-apiserver | Probe | Agree |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		agree := "yes"
		if !r.agree() {
			agree = "**NO**"
		}
		apiserver := r.apiserver
		if apiserver == "" {
			apiserver = "(no verdict)"
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s | %s | %s |\n", r.v.group, r.v.name, r.v.desc, r.kind, apiserver, r.probeVerdict(), agree)
	}
	return b.String()
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }
