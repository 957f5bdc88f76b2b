package unmutated

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

var (
	pod = markedObject{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, gvk: schema.GroupVersionKind{Version: "v1", Kind: "Pod"},
		namespace: "team", name: "web-1-a", id: marking.ID("pod-defaults", "a.example.com"), note: "pod-defaults/a.example.com since 2026-12-01T11:00:00Z",
		ownerKind: "Deployment", ownerNamespace: "team", ownerName: "web"}
	clusterRole = markedObject{gvr: schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		gvk: schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, name: "viewer",
		id: marking.ID("pod-defaults", "a.example.com"), note: "pod-defaults/a.example.com since 2026-12-01T11:00:00Z",
		ownerKind: "ClusterRole", ownerName: "viewer"}
	reportConfig = &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: "pod-defaults", Webhook: "a.example.com"}}}
)

func TestReport_json(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, cli.PrintObject(&out, cli.OutputJSON, newReport(found{objects: []markedObject{pod, clusterRole}}, reportConfig)))
	assert.JSONEq(t, `{"objects": [
  {"group": "", "version": "v1", "kind": "Pod", "namespace": "team", "name": "web-1-a", "circuitID": "`+pod.id+`",
   "configuration": "pod-defaults", "webhook": "a.example.com", "note": "pod-defaults/a.example.com since 2026-12-01T11:00:00Z",
   "owner": {"kind": "Deployment", "namespace": "team", "name": "web"}},
  {"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "ClusterRole", "name": "viewer", "circuitID": "`+pod.id+`",
   "configuration": "pod-defaults", "webhook": "a.example.com", "note": "pod-defaults/a.example.com since 2026-12-01T11:00:00Z",
   "owner": {"kind": "ClusterRole", "name": "viewer"}}
 ], "cleared": false}`, out.String())
}

func TestReport_yaml(t *testing.T) {
	var out bytes.Buffer
	rep := newReport(found{objects: []markedObject{clusterRole}, unavailable: []string{"listing widgets: forbidden"}}, reportConfig)
	rep.Cleared = true
	require.NoError(t, cli.PrintObject(&out, cli.OutputYAML, rep))
	assert.Equal(t, `cleared: true
objects:
- circuitID: `+pod.id+`
  configuration: pod-defaults
  group: rbac.authorization.k8s.io
  kind: ClusterRole
  name: viewer
  note: pod-defaults/a.example.com since 2026-12-01T11:00:00Z
  owner:
    kind: ClusterRole
    name: viewer
  version: v1
  webhook: a.example.com
unavailable:
- 'listing widgets: forbidden'
`, out.String())
}

func TestReport_nothingMarkedIsAnEmptyList(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, cli.PrintObject(&out, cli.OutputJSON, newReport(found{}, reportConfig)))
	assert.JSONEq(t, `{"objects": [], "cleared": false}`, out.String())
}

func TestReport_nameAndJSONPath(t *testing.T) {
	rep := newReport(found{objects: []markedObject{pod, clusterRole}}, reportConfig)
	for name, tc := range map[string]struct {
		output, want string
	}{
		"name is kind.group/name, without the namespace, as kubectl's": {"name", "pod/web-1-a\nclusterrole.rbac.authorization.k8s.io/viewer\n"},
		"jsonpath with the namespace":                                  {`jsonpath={range .objects[*]}{.namespace}/{.name}{"\n"}{end}`, "team/web-1-a\n/viewer\n"},
		"jsonpath of the owners":                                       {"jsonpath={.objects[*].owner.name}", "web viewer"},
		"a relaxed jsonpath":                                           {"jsonpath=.objects[0].circuitID", pod.id},
		"jsonpath-as-json":                                             {"jsonpath-as-json={.cleared}", "[\n    false\n]\n"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, cli.PrintObject(&out, tc.output, rep))
			assert.Equal(t, tc.want, out.String())
		})
	}
	var out bytes.Buffer
	require.NoError(t, cli.PrintObject(&out, cli.OutputName, newReport(found{}, reportConfig)))
	assert.Empty(t, out.String(), "nothing marked, no names")
}

func TestValidate_refusesABadOutputAsAUsageError(t *testing.T) {
	for _, output := range []string{"wide", "jsonpath", "jsonpath={.objects[*}", "custom-columns=NAME:.name"} {
		err := (&Options{Factory: factory.New(nil), Output: output}).Validate()
		var usage cli.UsageError
		require.ErrorAs(t, err, &usage, output)
	}
}

func TestExitStatus(t *testing.T) {
	marked := found{objects: []markedObject{pod}}
	holed := found{objects: []markedObject{pod}, unavailable: []string{"group metrics.k8s.io/v1beta1: unavailable"}}
	for name, tc := range map[string]struct {
		err       error
		res       found
		cleared   bool
		exitCode  bool
		wantCode  int // 0: nil; 1: an error that is no ExitError
		wantError string
	}{
		"nothing marked is 0":                               {res: found{}, exitCode: true},
		"marked objects without --exit-code are 0":          {res: marked},
		"marked objects with --exit-code are ExitMarked":    {res: marked, exitCode: true, wantCode: ExitMarked, wantError: "1 objects carry the mark " + circuit.UnmutatedLabel},
		"cleared objects with --exit-code are 0":            {res: marked, cleared: true, exitCode: true},
		"something unreadable fails, --exit-code or not":    {res: holed, wantCode: 1, wantError: "1 resources or configurations could not be read"},
		"something unreadable fails before ExitMarked":      {res: holed, exitCode: true, wantCode: 1, wantError: "could not be read"},
		"a failure while printing or clearing is a failure": {err: errors.New("clearing the mark of Pod team/web-1-a: forbidden"), res: marked, exitCode: true, wantCode: 1, wantError: "forbidden"},
	} {
		t.Run(name, func(t *testing.T) {
			err := exitStatus(tc.err, tc.res, tc.cleared, tc.exitCode)
			if tc.wantCode == 0 {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.wantError)
			var exit cli.ExitError
			if tc.wantCode == 1 {
				assert.False(t, errors.As(err, &exit), "a failure exits 1")
				return
			}
			require.ErrorAs(t, err, &exit)
			assert.Equal(t, tc.wantCode, exit.Code)
		})
	}
	assert.NotContains(t, []int{1, 2}, ExitMarked, "1 is a failure and 2 a usage error")
}
