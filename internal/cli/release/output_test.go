package release

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/clitest"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// "guard release --all --dry-run -o ..." prints the plan the table's lines
// say: one configuration to write (its circuit is this installation's and
// open), one that is not there, the marking policy to delete, its binding
// not found, and the guard policy and binding to delete.
func TestRun_dryRunOutputFormats(t *testing.T) {
	const mwc = "mutatingwebhookconfiguration.admissionregistration.k8s.io/"
	markingName := marking.Name(clitest.Conf, clitest.Hook)
	guardPolicy := admission.Options{}.Policy()
	for name, tc := range map[string]struct {
		output string
		want   string
	}{
		"name: what it would write or delete": {"name", mwc + clitest.Conf + "\n" +
			"mutatingadmissionpolicy.admissionregistration.k8s.io/" + markingName + "\n" +
			"validatingadmissionpolicybinding.admissionregistration.k8s.io/" + guardPolicy + "\n" +
			"validatingadmissionpolicy.admissionregistration.k8s.io/" + guardPolicy + "\n"},
		"jsonpath of the configurations written": {"jsonpath={.configurations[?(@.write==true)].name}", clitest.Conf},
		"jsonpath of one webhook's changes": {"jsonpath={.configurations[0].webhooks[0].changes}",
			`["failurePolicy Ignore -\u003e Fail","record entry removed","arming entry removed 2s later"]`},
		"jsonpath of the deletions": {`jsonpath={range .deletions[*]}{.resource}/{.name}: {.action}{"\n"}{end}`,
			"mutatingadmissionpolicybinding/" + markingName + ": not found\n" +
				"mutatingadmissionpolicy/" + markingName + ": delete\n" +
				"validatingadmissionpolicybinding/" + guardPolicy + ": delete\n" +
				"validatingadmissionpolicy/" + guardPolicy + ": delete\n"},
		"a relaxed jsonpath": {"jsonpath=configurations[1].webhooks[0].note", notFoundNote},
	} {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, err := dryRun(t, tc.output)
			require.NoError(t, err, stderr)
			assert.Equal(t, tc.want, stdout)
		})
	}

	t.Run("json", func(t *testing.T) {
		stdout, stderr, err := dryRun(t, "json")
		require.NoError(t, err, stderr)
		var rep dryRunReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		require.Len(t, rep.Configurations, 2)
		assert.Equal(t, configurationPlan{Kind: "Mutating", Name: clitest.Conf, Found: true, Write: true, DisarmLater: []string{clitest.Hook},
			Webhooks: []webhookPlan{{Webhook: clitest.Hook, Changes: []string{"failurePolicy Ignore -> Fail", "record entry removed", disarmLater}}}}, rep.Configurations[0])
		assert.Equal(t, configurationPlan{Kind: "Validating", Name: "gone", Webhooks: []webhookPlan{{Webhook: "v.example.com", Note: notFoundNote}}}, rep.Configurations[1])
		assert.Len(t, rep.Deletions, 4)
	})
	t.Run("the table is the lines, as before", func(t *testing.T) {
		stdout, stderr, err := dryRun(t, "table")
		require.NoError(t, err, stderr)
		assert.Contains(t, stdout, "mutatingwebhookconfiguration/"+clitest.Conf+" "+clitest.Hook+": released (failurePolicy Ignore -> Fail, record entry removed, arming entry removed 2s later) (dry run)\n")
		assert.Contains(t, stdout, "validatingwebhookconfiguration/gone v.example.com: "+notFoundNote+"\n")
		assert.Contains(t, stdout, "mutatingadmissionpolicy/"+markingName+" deleted (dry run)\n")
	})
}

// dryRun runs "guard release --all --dry-run -o output" against a fake
// cluster.
func dryRun(t *testing.T, output string) (string, string, error) {
	t.Helper()
	f := factory.New(nil)
	f.Config = &config.Configuration{Targets: []config.Target{
		{Kind: circuit.KindMutating, Configuration: clitest.Conf, Webhook: clitest.Hook},
		{Kind: circuit.KindValidating, Configuration: "gone", Webhook: "v.example.com"},
	}}
	policy, binding := admission.RenderPolicy(admission.Options{BreakerUsername: clitest.SAMain})
	mark := &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{
		Name: marking.Name(clitest.Conf, clitest.Hook), Annotations: map[string]string{circuit.MarksAnnotation: clitest.Conf + "/" + clitest.Hook}}}
	open := clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: clitest.Entry(clitest.SAMain)}, nil)
	f.RESTConfig, f.KubeClient, f.Client = &rest.Config{}, kubefake.NewClientset(), clitest.FakeReader(open, policy, binding, mark)
	var stdout, stderr strings.Builder
	o := &Options{Factory: f, IOStreams: cli.IOStreams{Out: &stdout, ErrOut: &stderr}, All: true, DryRun: true, Breaker: clitest.SAMain, Timeout: 1, Output: output}
	require.NoError(t, o.Validate())
	err := o.Run(context.Background())
	return stdout.String(), stderr.String(), err
}

func TestValidate_outputIsForADryRun(t *testing.T) {
	for name, tc := range map[string]struct {
		o    Options
		want string
	}{
		"json without --dry-run":   {Options{All: true, Output: "json"}, "-o json: only with --dry-run"},
		"name without --dry-run":   {Options{All: true, Output: "name"}, "only with --dry-run"},
		"an unknown format":        {Options{All: true, DryRun: true, Output: "wide"}, "must be table, json or yaml"},
		"a template that is wrong": {Options{All: true, DryRun: true, Output: "jsonpath={.configurations[}"}, "does not parse"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.o.Factory, tc.o.Timeout = factory.New(nil), 1
			err := tc.o.Validate()
			var usage cli.UsageError
			require.ErrorAs(t, err, &usage)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
