package version

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/cli"
)

func TestVersionCommand_outputFormats(t *testing.T) {
	build := Build{Version: "v1.2.3", Commit: "abc1234"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"one line by default":  {nil, "webhook-guard v1.2.3 (revision abc1234, " + runtime.Version() + ")\n"},
		"jsonpath":             {[]string{"-o", "jsonpath={.version}"}, "v1.2.3"},
		"a relaxed jsonpath":   {[]string{"-o", "jsonpath=revision"}, "abc1234"},
		"jsonpath-as-json":     {[]string{"--output", "jsonpath-as-json={.version}"}, "[\n    \"v1.2.3\"\n]\n"},
		"table is the default": {[]string{"-o", "table"}, "webhook-guard v1.2.3 (revision abc1234, " + runtime.Version() + ")\n"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := execute(build, tc.args...)
			require.NoError(t, err)
			assert.Equal(t, tc.want, out)
		})
	}
	want := Info{Version: "v1.2.3", Revision: "abc1234", GoVersion: runtime.Version()}
	for format, unmarshal := range map[string]func([]byte, any) error{"json": json.Unmarshal, "yaml": func(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) }} {
		out, err := execute(build, "-o", format)
		require.NoError(t, err, format)
		var got Info
		require.NoError(t, unmarshal([]byte(out), &got), format)
		assert.Equal(t, want, got, format)
	}
	out, err := execute(build, "-o", "json")
	require.NoError(t, err)
	assert.JSONEq(t, `{"version":"v1.2.3","revision":"abc1234","goVersion":"`+runtime.Version()+`"}`, out)
}

func TestVersionCommand_badOutputIsAUsageError(t *testing.T) {
	for output, want := range map[string]string{
		"name":          "-o name: the version is no Kubernetes object",
		"wide":          "must be table, json or yaml",
		"jsonpath={.a[": "does not parse",
	} {
		out, err := execute(Build{Version: "dev"}, "-o", output)
		var usage cli.UsageError
		require.ErrorAs(t, err, &usage, output)
		assert.ErrorContains(t, err, want)
		assert.Empty(t, out, output)
	}
}

func execute(build Build, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := NewCmd(cli.IOStreams{Out: &stdout, ErrOut: &stderr}, build)
	cmd.SetArgs(args)
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.ExecuteContext(context.Background())
	return stdout.String(), err
}

func TestNew_fallsBackToWhatGoBuildRecorded(t *testing.T) {
	recorded := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/webhook-guard/webhook-guard", Version: "v0.1.1-0.20260101000000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	clean := &debug.BuildInfo{
		Main:     debug.Module{Path: "github.com/webhook-guard/webhook-guard", Version: "v0.1.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fedcba9876543210fedcba9876543210fedcba98"}, {Key: "vcs.modified", Value: "false"}},
	}
	for name, tc := range map[string]struct {
		version, commit string
		info            *debug.BuildInfo
		want            Build
	}{
		"ldflags win over the build info": {"v1.2.3", "abc1234", recorded, Build{Version: "v1.2.3", Commit: "abc1234"}},
		"a plain go build in a modified checkout says so": {"dev", "unknown", recorded,
			Build{Version: "v0.1.1-0.20260101000000-0123456789ab+dirty", Commit: "0123456789abcdef0123456789abcdef01234567-dirty"}},
		"a plain go build at a tag":                   {"dev", "unknown", clean, Build{Version: "v0.1.0", Commit: "fedcba9876543210fedcba9876543210fedcba98"}},
		"empty ldflags are unset ones":                {"", "", clean, Build{Version: "v0.1.0", Commit: "fedcba9876543210fedcba9876543210fedcba98"}},
		"a devel main module keeps dev":               {"dev", "unknown", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, Build{Version: "dev", Commit: "unknown"}},
		"no build info keeps dev and unknown":         {"dev", "unknown", nil, Build{Version: "dev", Commit: "unknown"}},
		"a version from ldflags keeps the vcs commit": {"v2.0.0", "unknown", clean, Build{Version: "v2.0.0", Commit: "fedcba9876543210fedcba9876543210fedcba98"}},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, fromBuildInfo(tc.version, tc.commit, tc.info))
		})
	}
}
