package status

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/clitest"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	statusapi "github.com/webhook-guard/webhook-guard/internal/status"
)

func TestStatusReport_objectNames(t *testing.T) {
	const mwc, vwc = "mutatingwebhookconfiguration.admissionregistration.k8s.io/", "validatingwebhookconfiguration.admissionregistration.k8s.io/"
	for name, tc := range map[string]struct {
		rep  statusReport
		want []string
	}{
		"no targets, no names": {statusReport{}, nil},
		"each configuration once, in the targets' order": {statusReport{Targets: []statusapi.Row{
			{Kind: "Validating", Configuration: "b", State: stateClosed},
			{Kind: "Mutating", Configuration: "a", State: stateOpen},
			{Kind: "Mutating", Configuration: "a", Webhook: "second", State: stateClosed},
		}}, []string{vwc + "b", mwc + "a"}},
		"a configuration that is not found is no object": {statusReport{Targets: []statusapi.Row{
			{Kind: "Mutating", Configuration: "gone", State: stateMissing},
			{Kind: "Mutating", Configuration: "handed", State: "HandedOff"},
		}}, []string{mwc + "handed"}},
		"then the configurations of orphaned records": {statusReport{
			Targets:         []statusapi.Row{{Kind: "Mutating", Configuration: "a", State: stateClosed}},
			OrphanedRecords: []orphanRow{{Kind: "Mutating", Configuration: "a"}, {Kind: "Validating", Configuration: "old"}},
		}, []string{mwc + "a", vwc + "old"}},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.rep.ObjectNames())
		})
	}
}

// Each -o format of "guard status" prints the same look: one
// configuration with an open circuit on one of its two targets, and a
// configuration that is not there.
func TestRun_outputFormats(t *testing.T) {
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("[]")) }))
	defer leader.Close()
	policy, binding := admission.RenderPolicy(admission.Options{BreakerUsername: "system:serviceaccount:" + circuit.DefaultNamespace + ":" + circuit.DefaultServiceAccount})
	for name, tc := range map[string]struct {
		output string
		want   string
	}{
		"name":                    {"name", "mutatingwebhookconfiguration.admissionregistration.k8s.io/" + clitest.Conf + "\n"},
		"jsonpath of every state": {"jsonpath={.targets[*].state}", "Open Closed Missing"},
		"jsonpath with a filter": {`jsonpath={range .targets[?(@.state=="Open")]}{.configuration}/{.webhook}{"\n"}{end}`,
			clitest.Conf + "/" + clitest.Hook + "\n"},
		"a relaxed jsonpath":   {"jsonpath=.targets[2].problem", "configuration not found"},
		"jsonpath-as-json":     {"jsonpath-as-json={.targets[*].owner}", "[\n    \"" + clitest.SAMain + "\"\n]\n"},
		"the namespace, too":   {"jsonpath={.namespace}", circuit.DefaultNamespace},
		"yaml, as it was":      {"yaml", "  state: Missing\n"},
		"json, as it was":      {"json", `"state": "Open"`},
		"the table, as it was": {"table", "STATE    MODE"},
	} {
		t.Run(name, func(t *testing.T) {
			f := factory.New(nil)
			f.Config = &config.Configuration{Targets: []config.Target{
				{Kind: circuit.KindMutating, Configuration: clitest.Conf, Webhook: clitest.Hook},
				{Kind: circuit.KindMutating, Configuration: clitest.Conf, Webhook: "second.example.com"},
				{Kind: circuit.KindValidating, Configuration: "gone", Webhook: "v.example.com"},
			}}
			open := clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: clitest.Entry(clitest.SAMain)}, nil)
			f.RESTConfig, f.KubeClient, f.Client = &rest.Config{}, kubefake.NewClientset(), clitest.FakeReader(open, policy, binding)
			var stdout, stderr strings.Builder
			o := &Options{Factory: f, IOStreams: cli.IOStreams{Out: &stdout, ErrOut: &stderr}, Endpoint: leader.URL, Output: tc.output}
			require.NoError(t, o.Validate())
			require.NoError(t, o.Run(context.Background()))
			if strings.HasPrefix(tc.output, "jsonpath") || tc.output == "name" {
				assert.Equal(t, tc.want, stdout.String())
				return
			}
			assert.Contains(t, stdout.String(), tc.want)
		})
	}
}

func TestValidate_refusesABadOutputAsAUsageError(t *testing.T) {
	for _, output := range []string{"wide", "jsonpath=", "jsonpath={.targets[", "go-template={{.}}"} {
		o := &Options{Factory: factory.New(nil), Output: output}
		err := o.Validate()
		var usage cli.UsageError
		require.ErrorAs(t, err, &usage, output)
		assert.Contains(t, err.Error(), "-o ", output)
	}
}
