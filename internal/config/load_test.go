package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

const header = "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\n"

const minimalTarget = `targets:
- configuration: slow-mutator
  webhook: slow-mutator.example.com
  allowAdmissionWithoutMutation: true
`

func TestParse_defaults(t *testing.T) {
	cfg, err := Parse([]byte(header + minimalTarget))
	require.NoError(t, err)
	require.Len(t, cfg.Targets, 1)
	assert.Equal(t, Target{
		Kind:            circuit.KindMutating,
		Configuration:   "slow-mutator",
		Webhook:         "slow-mutator.example.com",
		Mode:            ModeIgnore,
		OpenAfter:       3,
		CloseAfter:      5,
		DampFlapping:    true,
		Probe:           Probe{Kind: ProbeAdmissionReview, Interval: time.Second},
		APIServerSignal: APIServerSignal{Enabled: true, MinRequests: DefaultMinRequests, FailureRatio: DefaultFailureRatio, MinOpen: DefaultMinOpen, WithoutPathProbe: WithoutPathProbeReport, TrafficAsProbe: true},
	}, cfg.Targets[0])
	assert.Equal(t, DefaultAPIServerScrapeInterval, cfg.APIServerScrapeInterval)
}

func TestParse_apiserverScrapeInterval(t *testing.T) {
	cfg, err := Parse([]byte("apiserverScrapeInterval: 1s\n" + header + minimalTarget))
	require.NoError(t, err)
	assert.Equal(t, time.Second, cfg.APIServerScrapeInterval)
}

func TestParse_everyField(t *testing.T) {
	cfg, err := Parse([]byte(header + `targets:
- configuration: slow-mutator
  webhook: slow-mutator.example.com
  allowAdmissionWithoutMutation: true
  mode: Bypass
  openAfter: 2
  closeAfter: 4
  dampFlapping: false
  probe:
    kind: HTTPGet
    interval: 200ms
    timeout: 250ms
    path: /healthz
  apiserverSignal:
    enabled: false
    minRequests: 10
    failureRatio: 0.25
    minOpen: 2s
    pathProbe:
      service:
        namespace: webhooks
        name: slow-mutator
        port: 8443
    withoutPathProbe: Open
    trafficAsProbe: false
- configuration: slow-mutator
  webhook: other.example.com
  allowAdmissionWithoutMutation: true
- configuration: second
  webhook: a.example.com
  allowAdmissionWithoutMutation: true
`))
	require.NoError(t, err)
	assert.Equal(t, Target{
		Kind:          circuit.KindMutating,
		Configuration: "slow-mutator", Webhook: "slow-mutator.example.com", Mode: ModeBypass, OpenAfter: 2, CloseAfter: 4,
		Probe: Probe{Kind: ProbeHTTPGet, Interval: 200 * time.Millisecond, Timeout: 250 * time.Millisecond, Path: "/healthz"},
		APIServerSignal: APIServerSignal{Enabled: false, MinRequests: 10, FailureRatio: 0.25, MinOpen: 2 * time.Second,
			PathProbe:        PathProbe{Service: &Service{Namespace: "webhooks", Name: "slow-mutator", Port: 8443}},
			WithoutPathProbe: WithoutPathProbeOpen},
	}, cfg.Targets[0])
	assert.Equal(t, "https:slow-mutator:8443", cfg.Targets[0].APIServerSignal.PathProbe.Service.ProxyName())
	assert.Equal(t, []string{"slow-mutator", "second"}, cfg.Names(circuit.KindMutating))
	assert.Empty(t, cfg.Names(circuit.KindValidating))
	assert.Equal(t, map[string][]string{
		"slow-mutator": {"slow-mutator.example.com", "other.example.com"},
		"second":       {"a.example.com"},
	}, cfg.Managed(circuit.KindMutating))
}

// The same names in a mutating and a validating configuration are two
// distinct targets.
func TestParse_sameNamesInBothKindsAreTwoTargets(t *testing.T) {
	cfg, err := Parse([]byte(header + `targets:
- configuration: shared
  webhook: a.example.com
  allowAdmissionWithoutMutation: true
- kind: Validating
  configuration: shared
  webhook: a.example.com
  allowAdmissionWithoutValidation: true
  mode: Bypass
`))
	require.NoError(t, err)
	require.Len(t, cfg.Targets, 2)
	assert.Equal(t, circuit.KindMutating, cfg.Targets[0].Kind)
	assert.Equal(t, circuit.KindValidating, cfg.Targets[1].Kind)
	assert.NotEqual(t, cfg.Targets[0].Key(), cfg.Targets[1].Key())
	assert.Equal(t, map[string][]string{"shared": {"a.example.com"}}, cfg.Managed(circuit.KindMutating))
	assert.Equal(t, map[string][]string{"shared": {"a.example.com"}}, cfg.Managed(circuit.KindValidating))
}

func TestParse_malformed(t *testing.T) {
	cases := map[string]struct {
		yaml string
		want string
	}{
		"an unknown top-level field is rejected": {
			header + minimalTarget + "extra: 1\n",
			`decoding GuardConfiguration: error unmarshaling JSON: while decoding JSON: json: unknown field "extra"`,
		},
		"an unknown target field is rejected": {
			header + minimalTarget + "  opnAfter: 2\n",
			`decoding GuardConfiguration: error unmarshaling JSON: while decoding JSON: json: unknown field "opnAfter"`,
		},
		"a missing allowAdmissionWithoutMutation is rejected": {
			header + "targets:\n- configuration: a\n  webhook: a.example.com\n",
			"invalid GuardConfiguration: targets[0].allowAdmissionWithoutMutation: Required value: must be true: opening the circuit admits objects without this webhook's mutation, and only an operator can approve that",
		},
		"a false allowAdmissionWithoutMutation is rejected": {
			header + "targets:\n- configuration: a\n  webhook: a.example.com\n  allowAdmissionWithoutMutation: false\n",
			"invalid GuardConfiguration: targets[0].allowAdmissionWithoutMutation: Invalid value: false: must be true: a webhook whose mutation is required must not be listed as a target",
		},
		"a duplicate target is rejected": {
			header + minimalTarget + "- configuration: slow-mutator\n  webhook: slow-mutator.example.com\n  allowAdmissionWithoutMutation: true\n",
			`invalid GuardConfiguration: targets[1]: Duplicate value: "Mutating/slow-mutator/slow-mutator.example.com (same as targets[0])"`,
		},
		"a scrape more often than once a second is rejected": {
			"apiserverScrapeInterval: 500ms\n" + header + minimalTarget,
			"invalid GuardConfiguration: apiserverScrapeInterval: Invalid value: \"500ms\": must be at least 1s: each read makes kube-apiserver gather all its metrics",
		},
		"holdWhenAllFail of 1 would hold every single failure": {
			"holdWhenAllFail: 1\n" + header + minimalTarget,
			"invalid GuardConfiguration: holdWhenAllFail: Invalid value: 1: must be 0 (off) or at least 2",
		},
		"an unknown kind is rejected": {
			header + "targets:\n- kind: Mutatin\n  configuration: a\n  webhook: a.example.com\n  allowAdmissionWithoutMutation: true\n",
			`invalid GuardConfiguration: targets[0].kind: Unsupported value: "Mutatin": supported values: "Mutating", "Validating"`,
		},
		"a validating target without allowAdmissionWithoutValidation is rejected": {
			header + "targets:\n- kind: Validating\n  configuration: a\n  webhook: a.example.com\n",
			"invalid GuardConfiguration: targets[0].allowAdmissionWithoutValidation: Required value: must be true: opening the circuit admits requests without this webhook's validation, a security decision, and only an operator can approve that",
		},
		"a validating target with a false allowAdmissionWithoutValidation is rejected": {
			header + "targets:\n- kind: Validating\n  configuration: a\n  webhook: a.example.com\n  allowAdmissionWithoutValidation: false\n",
			"invalid GuardConfiguration: targets[0].allowAdmissionWithoutValidation: Invalid value: false: must be true: a webhook whose validation is required must not be listed as a target",
		},
		"a validating target may not approve admission without mutation": {
			header + "targets:\n- kind: Validating\n  configuration: a\n  webhook: a.example.com\n  allowAdmissionWithoutValidation: true\n  allowAdmissionWithoutMutation: true\n",
			"invalid GuardConfiguration: targets[0].allowAdmissionWithoutMutation: Forbidden: a Validating target approves allowAdmissionWithoutValidation instead",
		},
		"a validating target may not stand on allowAdmissionWithoutMutation alone": {
			header + "targets:\n- kind: Validating\n  configuration: a\n  webhook: a.example.com\n  allowAdmissionWithoutMutation: true\n",
			"invalid GuardConfiguration: [targets[0].allowAdmissionWithoutValidation: Required value: must be true: opening the circuit admits requests without this webhook's validation, a security decision, and only an operator can approve that, targets[0].allowAdmissionWithoutMutation: Forbidden: a Validating target approves allowAdmissionWithoutValidation instead]",
		},
		"a mutating target may not approve admission without validation": {
			header + minimalTarget + "  allowAdmissionWithoutValidation: true\n",
			"invalid GuardConfiguration: targets[0].allowAdmissionWithoutValidation: Forbidden: a Mutating target approves allowAdmissionWithoutMutation instead; set kind: Validating for a validating webhook",
		},
		"a bad duration is rejected": {
			header + minimalTarget + "  probe:\n    interval: soon\n",
			`invalid GuardConfiguration: targets[0].probe.interval: Invalid value: "soon": not a duration such as 250ms or 1s`,
		},
		"a negative timeout is rejected": {
			header + minimalTarget + "  probe:\n    timeout: -1s\n",
			`invalid GuardConfiguration: targets[0].probe.timeout: Invalid value: "-1s": must be positive`,
		},
		"openAfter below 1 is rejected": {
			header + minimalTarget + "  openAfter: 0\n",
			"invalid GuardConfiguration: targets[0].openAfter: Invalid value: 0: must be at least 1",
		},
		"closeAfter below 1 is rejected": {
			header + minimalTarget + "  closeAfter: -2\n",
			"invalid GuardConfiguration: targets[0].closeAfter: Invalid value: -2: must be at least 1",
		},
		"openAfter above 20 is rejected": {
			header + minimalTarget + "  openAfter: 21\n",
			"invalid GuardConfiguration: targets[0].openAfter: Invalid value: 21: must be at most 20: up to that many probes of one webhook are in flight at once",
		},
		"closeAfter above 20 is rejected": {
			header + minimalTarget + "  closeAfter: 100000\n",
			"invalid GuardConfiguration: targets[0].closeAfter: Invalid value: 100000: must be at most 20: up to that many probes of one webhook are in flight at once",
		},
		"a probe interval below 100ms is rejected": {
			header + minimalTarget + "  probe:\n    interval: 99ms\n",
			`invalid GuardConfiguration: targets[0].probe.interval: Invalid value: "99ms": must be at least 100ms: each webhook is probed at most 10 times a second`,
		},
		"a failureRatio above 1 is rejected": {
			header + minimalTarget + "  apiserverSignal:\n    failureRatio: 1.5\n",
			"invalid GuardConfiguration: targets[0].apiserverSignal.failureRatio: Invalid value: 1.5: must be more than 0 and at most 1, the share of failed calls, such as 0.5",
		},
		"a failureRatio of 0 is rejected": {
			header + minimalTarget + "  apiserverSignal:\n    failureRatio: 0\n",
			"invalid GuardConfiguration: targets[0].apiserverSignal.failureRatio: Invalid value: 0: must be more than 0 and at most 1, the share of failed calls, such as 0.5",
		},
		"minRequests below 1 is rejected": {
			header + minimalTarget + "  apiserverSignal:\n    minRequests: 0\n",
			"invalid GuardConfiguration: targets[0].apiserverSignal.minRequests: Invalid value: 0: must be at least 1",
		},
		"an unknown withoutPathProbe is rejected": {
			header + minimalTarget + "  apiserverSignal:\n    withoutPathProbe: Trial\n",
			`invalid GuardConfiguration: targets[0].apiserverSignal.withoutPathProbe: Unsupported value: "Trial": supported values: "Report", "Open"`,
		},
		"a path probe service needs a namespace and a name": {
			header + minimalTarget + "  apiserverSignal:\n    pathProbe:\n      service: {port: 443}\n",
			"invalid GuardConfiguration: [targets[0].apiserverSignal.pathProbe.service.namespace: Required value: the namespace of the Service the webhook's clientConfig.service names, " +
				"targets[0].apiserverSignal.pathProbe.service.name: Required value: the name of the Service the webhook's clientConfig.service names]",
		},
		"a path probe service port out of range is rejected": {
			header + minimalTarget + "  apiserverSignal:\n    pathProbe:\n      service: {namespace: webhooks, name: hook, port: 70000}\n",
			"invalid GuardConfiguration: targets[0].apiserverSignal.pathProbe.service.port: Invalid value: 70000: must be between 1 and 65535, inclusive",
		},
		"a path probe service name that is not a Service name is rejected": {
			header + minimalTarget + "  apiserverSignal:\n    pathProbe:\n      service: {namespace: webhooks, name: hook.example}\n",
			"invalid GuardConfiguration: targets[0].apiserverSignal.pathProbe.service.name: Invalid value: \"hook.example\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
		},
		"an unknown apiserverSignal field is rejected": {
			header + minimalTarget + "  apiserverSignal:\n    ratio: 0.5\n",
			"decoding GuardConfiguration: error unmarshaling JSON: while decoding JSON: json: unknown field \"ratio\"",
		},
		"an instance that is not a DNS label is rejected": {
			header + "instance: Canary_1\n" + minimalTarget,
			"invalid GuardConfiguration: instance: Invalid value: \"Canary_1\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
		},
		"an instance longer than 40 characters is rejected": {
			header + "instance: " + strings.Repeat("a", 41) + "\n" + minimalTarget,
			"invalid GuardConfiguration: instance: Too long: may not be more than 40 bytes",
		},
		"an unknown mode is rejected": {
			header + minimalTarget + "  mode: Open\n",
			`invalid GuardConfiguration: targets[0].mode: Unsupported value: "Open": supported values: "Ignore", "Bypass", "Observe"`,
		},
		"a false approval is rejected in Observe mode too": {
			header + "targets:\n- configuration: a\n  webhook: a.example.com\n  mode: Observe\n  allowAdmissionWithoutMutation: false\n",
			"invalid GuardConfiguration: targets[0].allowAdmissionWithoutMutation: Invalid value: false: must be true: a webhook whose mutation is required must not be listed as a target",
		},
		"the other kind's approval is forbidden in Observe mode too": {
			header + "targets:\n- kind: Validating\n  configuration: a\n  webhook: a.example.com\n  mode: Observe\n  allowAdmissionWithoutMutation: true\n",
			"invalid GuardConfiguration: targets[0].allowAdmissionWithoutMutation: Forbidden: a Validating target approves allowAdmissionWithoutValidation instead",
		},
		"an unknown probe kind is rejected": {
			header + minimalTarget + "  probe:\n    kind: TCP\n",
			`invalid GuardConfiguration: targets[0].probe.kind: Unsupported value: "TCP": supported values: "AdmissionReview", "HTTPGet"`,
		},
		"an HTTPGet probe without a path is rejected": {
			header + minimalTarget + "  probe:\n    kind: HTTPGet\n",
			`invalid GuardConfiguration: targets[0].probe.path: Invalid value: "": an HTTPGet probe needs an absolute path such as /healthz`,
		},
		"a path on an AdmissionReview probe is rejected": {
			header + minimalTarget + "  probe:\n    path: /healthz\n",
			`invalid GuardConfiguration: targets[0].probe.path: Invalid value: "/healthz": only HTTPGet probes take a path; AdmissionReview probes use the webhook's own path`,
		},
		"a wrong kind is rejected": {
			"apiVersion: config.webhook-guard.io/v1alpha1\nkind: Config\n" + minimalTarget,
			`invalid GuardConfiguration: kind: Unsupported value: "Config": supported values: "GuardConfiguration"`,
		},
		"a wrong apiVersion is rejected": {
			"apiVersion: v1\nkind: GuardConfiguration\n" + minimalTarget,
			`invalid GuardConfiguration: apiVersion: Unsupported value: "v1": supported values: "config.webhook-guard.io/v1alpha1"`,
		},
		"a configuration name that is not a DNS subdomain is rejected": {
			header + "targets:\n- configuration: Slow_Mutator\n  webhook: a.example.com\n  allowAdmissionWithoutMutation: true\n",
			"invalid GuardConfiguration: targets[0].configuration: Invalid value: \"Slow_Mutator\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
		},
		"a field given twice is rejected": {
			header + "targets:\n- configuration: a\n  configuration: b\n  webhook: a.example.com\n  allowAdmissionWithoutMutation: true\n",
			`decoding GuardConfiguration: error converting YAML to JSON: yaml: unmarshal errors:` + "\n" + `  line 5: key "configuration" already set in map`,
		},
		"not YAML at all is rejected": {
			"{targets: [",
			"decoding GuardConfiguration: error converting YAML to JSON: yaml: line 1: did not find expected node content",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.yaml))
			require.Error(t, err)
			assert.Nil(t, cfg)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

// TestParse_acceptsEachBound: a value at each bound is accepted, in any
// spelling of a Go duration.
func TestParse_acceptsEachBound(t *testing.T) {
	cases := map[string]struct {
		target string
		check  func(*testing.T, Target)
	}{
		"openAfter 20":                 {"  openAfter: 20\n", func(t *testing.T, tg Target) { assert.Equal(t, MaxProbesInARow, tg.OpenAfter) }},
		"closeAfter 20":                {"  closeAfter: 20\n", func(t *testing.T, tg Target) { assert.Equal(t, MaxProbesInARow, tg.CloseAfter) }},
		"an interval of 100ms":         {"  probe: {interval: 100ms}\n", func(t *testing.T, tg Target) { assert.Equal(t, MinProbeInterval, tg.Probe.Interval) }},
		"an interval of 0.1s":          {"  probe: {interval: 0.1s}\n", func(t *testing.T, tg Target) { assert.Equal(t, MinProbeInterval, tg.Probe.Interval) }},
		"an interval of 60ms and 40ms": {"  probe: {interval: 60ms40ms}\n", func(t *testing.T, tg Target) { assert.Equal(t, MinProbeInterval, tg.Probe.Interval) }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := Parse([]byte(header + minimalTarget + c.target))
			require.NoError(t, err)
			c.check(t, cfg.Targets[0])
		})
	}
}

func TestLoad_errorNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(path, []byte(header+minimalTarget+"  openAfter: 0\n"), 0o600))
	_, err := Load(path)
	require.Error(t, err)
	assert.Equal(t, path+": invalid GuardConfiguration: targets[0].openAfter: Invalid value: 0: must be at least 1", err.Error())

	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorContains(t, err, "missing.yaml: no such file or directory")
}

// A path probe service without a port gets clientConfig.service's default.
func TestParse_pathProbeServicePortDefaultsTo443(t *testing.T) {
	cfg, err := Parse([]byte(header + minimalTarget + "  apiserverSignal:\n    pathProbe:\n      service: {namespace: webhooks, name: hook}\n"))
	require.NoError(t, err)
	assert.Equal(t, &Service{Namespace: "webhooks", Name: "hook", Port: 443}, cfg.Targets[0].APIServerSignal.PathProbe.Service)
	assert.Equal(t, "https:hook:443", cfg.Targets[0].APIServerSignal.PathProbe.Service.ProxyName())
}

// An Observe target needs no approval, since it admits nothing without its
// webhook, and is not managed: the guard policy does not own its fields.
// A configuration that mixes modes is managed for its other targets only.
func TestParse_observeNeedsNoApprovalAndIsNotManaged(t *testing.T) {
	cfg, err := Parse([]byte(header + `targets:
- configuration: watched
  webhook: a.example.com
  mode: Observe
- kind: Validating
  configuration: watched-policy
  webhook: v.example.com
  mode: Observe
  allowAdmissionWithoutValidation: true
- configuration: mixed
  webhook: observed.example.com
  mode: Observe
- configuration: mixed
  webhook: bypassed.example.com
  allowAdmissionWithoutMutation: true
  mode: Bypass
`))
	require.NoError(t, err)
	require.Len(t, cfg.Targets, 4)
	for name, c := range map[string]struct {
		target  Target
		observe bool
	}{
		"an Observe target without approval":    {cfg.Targets[0], true},
		"an Observe target with its approval":   {cfg.Targets[1], true},
		"a Bypass target beside an Observe one": {cfg.Targets[3], false},
	} {
		t.Run(name, func(t *testing.T) { assert.Equal(t, c.observe, c.target.Observes()) })
	}
	assert.Equal(t, ModeObserve, cfg.Targets[0].Mode)
	assert.Equal(t, map[string][]string{"mixed": {"bypassed.example.com"}}, cfg.Managed(circuit.KindMutating),
		"only the webhooks the breaker may write are managed")
	assert.Empty(t, cfg.Managed(circuit.KindValidating), "a configuration with only Observe targets is not managed")
	assert.Equal(t, []string{"watched", "mixed"}, cfg.Names(circuit.KindMutating), "Names still lists every target configuration")
}

func TestParse_noTargetIsAnIdleGuard(t *testing.T) {
	for name, doc := range map[string]string{
		"an empty list": header + "targets: []\n",
		"no list":       header,
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Parse([]byte(doc))
			require.NoError(t, err)
			assert.Empty(t, cfg.Targets)
			assert.Equal(t, DefaultHoldWhenAllFail, cfg.HoldWhenAllFail)
		})
	}
}
