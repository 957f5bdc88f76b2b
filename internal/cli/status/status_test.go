package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/clitest"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	statusapi "github.com/webhook-guard/webhook-guard/internal/status"
)

// handedOffEntry is e as a handoff keeps it.
func handedOffEntry(e circuit.Entry) circuit.Entry {
	e.HandedOffAt = ptr.To(metav1.NewTime(clitest.Clock))
	return e
}

func TestObjectRow_showsTheOwnerAndTheHandedOffOriginal(t *testing.T) {
	target := config.Target{Kind: circuit.KindMutating, Configuration: clitest.Conf, Webhook: clitest.Hook}
	override := map[string]string{circuit.OverrideAnnotation: "INC-7"}
	const original = "original failurePolicy Fail, mode Ignore, opened at 2026-12-01T11:00:00Z by " + clitest.SAOther
	handedOff := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: "kube-system", Name: clitest.Conf + ".1", CreationTimestamp: metav1.NewTime(clitest.Clock)},
		InvolvedObject:      corev1.ObjectReference{Kind: "MutatingWebhookConfiguration", Name: clitest.Conf, UID: "uid-1"},
		Reason:              string(decide.HandedOff),
		Message:             "administrator override: webhook-guard released " + clitest.Hook + " (" + original + ") and keeps its hands off this configuration; …",
		ReportingController: circuit.ReportingController,
	}
	for name, tc := range map[string]struct {
		obj       client.Object
		events    []client.Object
		state     string
		owner     string
		originals string
	}{
		"an open circuit names its owner": {clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: clitest.Entry(clitest.SAOther)}, nil), nil, "Open", clitest.SAOther, ""},
		"a handed-off circuit the breaker has not released yet, from its entry": {
			clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: clitest.Entry(clitest.SAOther)}, override), nil, "HandedOff", clitest.SAOther, original},
		"a handed-off circuit, from the entry the handoff kept": {
			clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: handedOffEntry(clitest.Entry(clitest.SAOther))}, override), nil, "HandedOff", clitest.SAOther, original},
		"a handed-back circuit is open, and shows its kept original": {
			clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: handedOffEntry(clitest.Entry(clitest.SAOther))}, nil), nil, "Open", clitest.SAOther, original},
		"a released one, from its HandedOff Event": {
			clitest.OpenConfiguration(t, nil, override), []client.Object{handedOff}, "HandedOff", "", original + " (from Event kube-system/" + clitest.Conf + ".1, reported by webhook-guard at 2026-12-01T12:00:00Z)"},
	} {
		t.Run(name, func(t *testing.T) {
			row := objectRow(context.Background(), clitest.FakeReader(append(tc.events, tc.obj)...), target)
			assert.Equal(t, tc.state, row.State)
			assert.Equal(t, tc.owner, row.Owner)
			assert.Equal(t, tc.originals, row.Original)
			if tc.originals != "" {
				assert.Contains(t, row.Problem, tc.originals, "the table prints it")
			}
		})
	}

	var out strings.Builder
	require.NoError(t, printStatus(&out, &strings.Builder{}, statusReport{Targets: []statusapi.Row{
		objectRow(context.Background(), clitest.FakeReader(clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: clitest.Entry(clitest.SAOther)}, nil)), target),
	}}))
	assert.Contains(t, out.String(), "OWNER")
	assert.Contains(t, out.String(), clitest.SAOther)
}

// A released circuit's original failurePolicy is believed only from a
// HandedOff Event about this configuration's UID reported by the guard:
// anyone who may create Events in default can write one with the reason
// and the name. The ignored ones are counted in a warning.
func TestObjectRow_believesOnlyTheGuardsHandedOffEventForThisUID(t *testing.T) {
	target := config.Target{Kind: circuit.KindMutating, Configuration: clitest.Conf, Webhook: clitest.Hook}
	override := map[string]string{circuit.OverrideAnnotation: "INC-7"}
	const genuine = "original failurePolicy Fail, mode Ignore, opened at 2026-12-01T11:00:00Z by " + clitest.SAMain
	const forged = "original failurePolicy Ignore, mode Ignore, opened at 2026-12-01T11:00:00Z by " + clitest.SAMain
	handedOff := func(name, original string, uid types.UID, controller string, at time.Time) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:          metav1.ObjectMeta{Namespace: "kube-system", Name: name, CreationTimestamp: metav1.NewTime(at)},
			InvolvedObject:      corev1.ObjectReference{Kind: "MutatingWebhookConfiguration", Name: clitest.Conf, UID: uid},
			Reason:              string(decide.HandedOff),
			Message:             "administrator override: webhook-guard released " + clitest.Hook + " (" + original + ") and keeps its hands off this configuration; …",
			ReportingController: controller,
			EventTime:           metav1.NewMicroTime(at),
		}
	}
	const fromGenuine = genuine + " (from Event kube-system/genuine, reported by webhook-guard at 2026-12-01T12:00:00Z)"
	later := clitest.Clock.Add(time.Minute)
	for name, tc := range map[string]struct {
		events  []client.Object
		want    string
		ignored int
	}{
		"the guard's Event about this UID is believed, and named": {
			events: []client.Object{handedOff("genuine", genuine, "uid-1", circuit.ReportingController, clitest.Clock)}, want: fromGenuine},
		"an Event about another UID is not": {
			events: []client.Object{handedOff("forged", forged, "uid-0", circuit.ReportingController, later)}, ignored: 1},
		"nor one without a UID": {
			events: []client.Object{handedOff("forged", forged, "", circuit.ReportingController, later)}, ignored: 1},
		"nor one reported by another controller": {
			events: []client.Object{handedOff("forged", forged, "uid-1", "someone-else", later)}, ignored: 1},
		"nor one without a reportingController": {
			events: []client.Object{handedOff("forged", forged, "uid-1", "", later)}, ignored: 1},
		"nor one whose only claim is a core/v1 source": {
			events: []client.Object{func() *corev1.Event {
				ev := handedOff("forged", forged, "uid-1", "", later)
				ev.Source.Component = circuit.ReportingController
				return ev
			}()}, ignored: 1},
		"a later forgery beside the guard's Event changes nothing but the warning": {
			events: []client.Object{
				handedOff("genuine", genuine, "uid-1", circuit.ReportingController, clitest.Clock),
				handedOff("forged", forged, "uid-1", "kubectl", later),
				handedOff("forged-2", forged, "", circuit.ReportingController, later),
			}, want: fromGenuine, ignored: 2},
	} {
		t.Run(name, func(t *testing.T) {
			row := objectRow(context.Background(), clitest.FakeReader(append(tc.events, clitest.OpenConfiguration(t, nil, override))...), target)
			assert.Equal(t, "HandedOff", row.State)
			assert.Equal(t, tc.want, row.Original)
			if tc.want != "" {
				assert.Contains(t, row.Problem, tc.want, "the table prints it")
			}
			assert.NotContains(t, row.Problem, forged)
			if tc.ignored == 0 {
				assert.NotContains(t, row.Problem, "ignored")
				return
			}
			assert.Contains(t, row.Problem, fmt.Sprintf("warning: ignored %d HandedOff Events not reported by webhook-guard for this configuration's UID uid-1", tc.ignored))
		})
	}
}

// With --exit-code the exit status says what was found: 3 for an open
// circuit, 4 for no leader (which wins), 5 for a guard policy that is not
// enforced (which wins over both), as the help says; none is 2, a usage
// error's. --wait looks again until all is well, and with nothing that
// gets better, fails with the last look.
func TestRun_exitCode(t *testing.T) {
	targets := map[string][]string{clitest.Conf: {clitest.Hook}}
	policy, binding := admission.RenderPolicy(admission.Options{BreakerUsername: "system:serviceaccount:" + circuit.DefaultNamespace + ":" + circuit.DefaultServiceAccount, Managed: targets})
	other, _ := admission.RenderPolicy(admission.Options{BreakerUsername: "system:serviceaccount:elsewhere:guard", Managed: targets})
	fewer, _ := admission.RenderPolicy(admission.Options{BreakerUsername: "system:serviceaccount:" + circuit.DefaultNamespace + ":" + circuit.DefaultServiceAccount})
	weakened := policy.DeepCopy()
	weakened.Spec.Validations = weakened.Spec.Validations[:1]
	open := func(t *testing.T) client.Object {
		return clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: clitest.Entry(clitest.SAMain)}, nil)
	}
	closed := func(t *testing.T) client.Object { return clitest.OpenConfiguration(t, nil, nil) }
	answering := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("[]")) }))
	defer answering.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusForbidden) }))
	defer refusing.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	cases := map[string]struct {
		object   func(*testing.T) client.Object
		endpoint string
		exitCode bool
		// policy is the guard policy in the cluster; nil: the rendered one.
		policy client.Object
		wait   time.Duration
		want   int // 0: no error
		// wantErr, without --exit-code: the error.
		wantErr string
	}{
		"every circuit closed and the endpoint answers":            {object: closed, endpoint: answering.URL, exitCode: true},
		"an open circuit exits 3":                                  {object: open, endpoint: answering.URL, exitCode: true, want: ExitCircuitOpen},
		"a missing guard policy exits 5, over no leader":           {object: open, policy: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: "x"}}, exitCode: true, want: ExitPolicyNotEnforced},
		"a policy rendered for another breaker is enforced for it": {object: closed, endpoint: answering.URL, policy: other, exitCode: true},
		"a weakened guard policy exits 5":                          {object: closed, endpoint: answering.URL, policy: weakened, exitCode: true, want: ExitPolicyNotEnforced},
		"a policy without the installed targets exits 5":           {object: closed, endpoint: answering.URL, policy: fewer, exitCode: true, want: ExitPolicyNotEnforced},
		"--wait with all well returns the first look":              {object: closed, endpoint: answering.URL, exitCode: true, wait: time.Hour},
		"--wait without --exit-code fails with the last look":      {object: open, endpoint: answering.URL, wait: time.Millisecond, wantErr: "after 1ms: 1 of 1 circuits open"},
		"--wait with --exit-code exits with the last look's code":  {object: open, endpoint: answering.URL, exitCode: true, wait: time.Millisecond, want: ExitCircuitOpen},
		"an endpoint that does not answer is no leader":            {object: closed, endpoint: gone.URL, exitCode: true, want: ExitNoLeader},
		"no Lease is no leader":                                    {object: closed, exitCode: true, want: ExitNoLeader},
		"no leader wins over an open circuit":                      {object: open, exitCode: true, want: ExitNoLeader},
		"without --exit-code an open circuit and no leader are 0":  {object: open},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := factory.New(nil)
			f.Config = &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: clitest.Conf, Webhook: clitest.Hook}}}
			installed := tc.policy
			if installed == nil {
				installed = policy
			}
			f.RESTConfig, f.KubeClient, f.Client = &rest.Config{}, kubefake.NewClientset(), clitest.FakeReader(tc.object(t), installed, binding)
			var stdout, stderr strings.Builder
			o := &Options{Factory: f, IOStreams: cli.IOStreams{Out: &stdout, ErrOut: &stderr}, Endpoint: tc.endpoint, Output: cli.OutputTable, ExitCode: tc.exitCode, Wait: tc.wait}
			err := o.Run(context.Background())
			assert.Contains(t, stdout.String(), clitest.Hook, "the table is printed whatever the exit status")
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			if tc.want == 0 {
				require.NoError(t, err)
				return
			}
			assert.NotEqual(t, 2, tc.want, "2 is a usage error's")
			var exit cli.ExitError
			require.ErrorAs(t, err, &exit)
			assert.Equal(t, tc.want, exit.Code)
		})
	}
}

// A 401 or 403 through the pods proxy is the guard's (plain text, which
// client-go marks as an unexpected server response) or the apiserver's (a
// Status object); only the guard's is explained as such.
func TestRefusedByGuard_tellsTheGuardFromTheAPIServer(t *testing.T) {
	reader := "system:serviceaccount:ns:" + statusapi.ReaderServiceAccount
	pods := schema.GroupResource{Resource: "pods"}
	cases := map[string]struct {
		err  error
		want string
	}{
		"the guard did not accept the token": {
			err:  apierrors.NewGenericServerResponse(401, "get", pods, "https:leader:8443", "Unauthorized", 0, true),
			want: "the leader did not accept the token of " + reader + " (401 Unauthorized): Unauthorized"},
		"the guard did not authorize the reader": {
			err:  apierrors.NewGenericServerResponse(403, "get", pods, "https:leader:8443", "Authorization denied for user "+reader, 0, true),
			want: "the leader does not let " + reader + " read /status (403 Forbidden; is the ClusterRole webhook-guard-status-reader bound to it?): Authorization denied for user " + reader},
		"the apiserver refused the caller":      {err: apierrors.NewForbidden(pods, "https:leader:8443", errors.New(`cannot get resource "pods/proxy"`))},
		"the apiserver did not know the caller": {err: apierrors.NewUnauthorized("Unauthorized")},
		"anything else is not a refusal":        {err: apierrors.NewGenericServerResponse(503, "get", pods, "https:leader:8443", "unavailable", 0, true)},
		"nor an error without a status":         {err: errors.New("dial tcp: connection refused")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := refusedByGuard(fmt.Errorf("wrapped: %w", tc.err), "ns")
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

// An Observe target's row says what would have happened and when, from
// the leader's memory: WouldOpen since then while its circuit would be
// open, which does not count as open for --exit-code.
func TestRun_observeShowsWhatWouldHaveHappened(t *testing.T) {
	const since, closedAt = "2026-12-01T11:59:00Z", "2026-12-01T11:00:00Z"
	for name, tc := range map[string]struct {
		leader    statusapi.Row
		wantState string
		wantSince string
	}{
		"would be open": {
			leader:    statusapi.Row{WouldOpenSince: since, WouldOpenSignal: decide.SignalProbe, WouldClosedAt: closedAt},
			wantState: statusapi.StateWouldOpen, wantSince: since,
		},
		"would have closed": {
			leader:    statusapi.Row{WouldClosedAt: closedAt},
			wantState: "Closed", wantSince: "would have closed " + closedAt,
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, output := range []string{cli.OutputTable, "json"} {
				stdout := runWithLeader(t, tc.leader, config.ModeObserve, output)
				if output == "json" {
					var rep statusReport
					require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
					require.Len(t, rep.Targets, 1)
					row := rep.Targets[0]
					assert.Equal(t, tc.wantState, row.State)
					assert.Equal(t, string(config.ModeObserve), row.Mode)
					assert.Equal(t, tc.leader.WouldOpenSince, row.WouldOpenSince)
					assert.Equal(t, tc.leader.WouldClosedAt, row.WouldClosedAt)
					assert.Empty(t, row.Since, "since stays the record's")
					continue
				}
				var line string
				for _, l := range strings.Split(stdout, "\n") {
					if strings.Contains(l, clitest.Hook) {
						line = l
					}
				}
				assert.Regexp(t, `\s`+tc.wantState+`\s+Observe\s+`+regexp.QuoteMeta(tc.wantSince), line)
			}
		})
	}
}

// The leader's flap damping reaches both outputs: a Damped line under the
// table, and reopenings and dampedFor in -o json.
func TestRun_showsTheLeadersFlapDamping(t *testing.T) {
	for _, output := range []string{cli.OutputTable, "json"} {
		stdout := runWithLeader(t, statusapi.Row{Reopenings: 2, DampedFor: "20s"}, config.ModeBypass, output)
		if output == "json" {
			var rep statusReport
			require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
			require.Len(t, rep.Targets, 1)
			assert.Equal(t, 2, rep.Targets[0].Reopenings)
			assert.Equal(t, "20s", rep.Targets[0].DampedFor)
			continue
		}
		assert.Contains(t, stdout, "Damped: "+clitest.Hook+" re-opened 2 time(s) in a row soon after closing; it stays open at least 20s after opening before it may close")
	}
}

// runWithLeader runs "guard status -o output" on one target
// clitest.Conf/clitest.Hook of mode, open on the objects, whose leader
// answers /status with leader (its names filled in), and returns stdout.
// In Observe mode it adds --exit-code, which must give 0: WouldOpen is
// not an open circuit.
func runWithLeader(t *testing.T, leader statusapi.Row, mode config.Mode, output string) string {
	t.Helper()
	leader.Kind, leader.Configuration, leader.Webhook = string(circuit.KindMutating), clitest.Conf, clitest.Hook
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode([]statusapi.Row{leader})
	}))
	defer srv.Close()
	f := factory.New(nil)
	f.Config = &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: clitest.Conf, Webhook: clitest.Hook, Mode: mode}}}
	policy, binding := admission.RenderPolicy(admission.Options{BreakerUsername: "system:serviceaccount:" + circuit.DefaultNamespace + ":" + circuit.DefaultServiceAccount})
	f.RESTConfig, f.KubeClient, f.Client = &rest.Config{}, kubefake.NewClientset(), clitest.FakeReader(clitest.OpenConfiguration(t, nil, nil), policy, binding)
	var stdout strings.Builder
	o := &Options{Factory: f, IOStreams: cli.IOStreams{Out: &stdout, ErrOut: &strings.Builder{}}, Endpoint: srv.URL, Output: output, ExitCode: mode == config.ModeObserve}
	require.NoError(t, o.Run(context.Background()), "WouldOpen is not an open circuit for --exit-code")
	return stdout.String()
}
