// Command demo starts a local control plane (kube-apiserver and etcd built
// from source), a sample slow mutating webhook behind a real Service, and
// shows what each failure policy costs a client. Run it with "make demo".
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"text/tabwriter"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const (
	namespace = "demo"
	service   = "slow-mutator"
	webhook   = "slow-mutator.example.com"
	path      = "/mutate"
	delay     = 2 * time.Second
	samples   = 5
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	say("starting kube-apiserver and etcd (building them first if missing: about 11 minutes the first time)")
	env, err := harness.Start(harness.Options{})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping the control plane")
		env.Stop()
	}()

	ip := harness.NextServiceIP()
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: ip, DNSNames: []string{service + "." + namespace + ".svc"}})
	if err != nil {
		return err
	}
	defer wh.Close()
	if err := env.ServiceFor(ctx, namespace, service, ip, wh.Port()); err != nil {
		return err
	}
	say("sample webhook %s serves %s behind Service %s/%s (ClusterIP %s, port %d), timeoutSeconds 1", webhook, path, namespace, service, ip, wh.Port())

	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: service},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    webhook,
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](1),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: service, Path: ptr.To(path), Port: ptr.To(wh.Port())},
				CABundle: wh.CA.CertPEM,
			},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
		}},
	}
	wh.SetBehaviour(path, harness.Allow())
	if err := env.Client.Create(ctx, mwc); err != nil {
		return err
	}

	var rows []row
	measure := func(label string, edit func(*admissionregistrationv1.MutatingWebhook), b harness.Behaviour) error {
		wh.SetBehaviour(path, b)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(mwc), mwc); err != nil {
			return err
		}
		edit(&mwc.Webhooks[0])
		if err := env.Client.Update(ctx, mwc); err != nil {
			return err
		}
		// Give the apiserver's webhook informer a moment to see the update.
		time.Sleep(time.Second)
		r := row{label: label}
		for i := 0; i < samples; i++ {
			before := wh.Calls(path)
			start := time.Now()
			err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "demo-"}})
			r.took = append(r.took, time.Since(start))
			r.called += wh.Calls(path) - before
			if err != nil {
				r.rejected++
			}
		}
		rows = append(rows, r)
		say("measured %s", label)
		return nil
	}
	slow := harness.Delayed(delay, harness.Allow())
	steps := []struct {
		label string
		edit  func(*admissionregistrationv1.MutatingWebhook)
		b     harness.Behaviour
	}{
		{"healthy, Fail", func(*admissionregistrationv1.MutatingWebhook) {}, harness.Allow()},
		{"slow, Fail", func(*admissionregistrationv1.MutatingWebhook) {}, slow},
		{"slow, Ignore", func(w *admissionregistrationv1.MutatingWebhook) {
			w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}, slow},
		{"slow, Ignore + matchCondition false", func(w *admissionregistrationv1.MutatingWebhook) {
			w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "webhook-guard.io/circuit-open", Expression: "false"}}
		}, slow},
	}
	for _, s := range steps {
		if err := measure(s.label, s.edit, s.b); err != nil {
			return err
		}
	}
	printTable(rows)
	return nil
}

type row struct {
	label    string
	took     []time.Duration
	rejected int
	called   int
}

func printTable(rows []row) {
	fmt.Printf("\nConfigMap create through the Go client, %d samples per case; the webhook sleeps %s against timeoutSeconds 1 when slow.\n\n", samples, delay)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tmedian\toutcome\twebhook calls")
	for _, r := range rows {
		sorted := append([]time.Duration(nil), r.took...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		outcome := fmt.Sprintf("%d/%d created", len(r.took)-r.rejected, len(r.took))
		if r.rejected == len(r.took) {
			outcome = fmt.Sprintf("%d/%d rejected", r.rejected, len(r.took))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", r.label, sorted[len(sorted)/2].Round(time.Millisecond), outcome, r.called)
	}
	tw.Flush()
	fmt.Println()
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "demo: "+format+"\n", args...)
}
