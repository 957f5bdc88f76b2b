package config

import (
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// Load reads, strictly decodes, validates and defaults the
// GuardConfiguration at path. Every error names the file, and validation
// errors name the field and the value.
func Load(path string) (*Configuration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading configuration: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse is Load without the file.
func Parse(data []byte) (*Configuration, error) {
	var f file
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", Kind, err)
	}
	cfg, errs := convert(&f)
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s: %w", Kind, errs.ToAggregate())
	}
	return cfg, nil
}

func convert(f *file) (*Configuration, field.ErrorList) {
	var errs field.ErrorList
	if f.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), f.APIVersion, []string{APIVersion}))
	}
	if f.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), f.Kind, []string{Kind}))
	}
	// No target is a guard that runs idle: installed before the first
	// webhook is approved, it probes and changes nothing.
	targets := field.NewPath("targets")
	cfg := &Configuration{HoldWhenAllFail: DefaultHoldWhenAllFail}
	if f.HoldWhenAllFail != nil {
		cfg.HoldWhenAllFail = *f.HoldWhenAllFail
		if cfg.HoldWhenAllFail < 0 || cfg.HoldWhenAllFail == 1 {
			errs = append(errs, field.Invalid(field.NewPath("holdWhenAllFail"), cfg.HoldWhenAllFail, "must be 0 (off) or at least 2"))
		}
	}
	cfg.APIServerScrapeInterval = duration(field.NewPath("apiserverScrapeInterval"), f.ScrapeInterval, DefaultAPIServerScrapeInterval, &errs)
	if d := cfg.APIServerScrapeInterval; d > 0 && d < MinAPIServerScrapeInterval {
		errs = append(errs, field.Invalid(field.NewPath("apiserverScrapeInterval"), f.ScrapeInterval, "must be at least 1s: each read makes kube-apiserver gather all its metrics"))
	}
	cfg.Instance = f.Instance
	if f.Instance != "" {
		for _, msg := range validation.IsDNS1123Label(f.Instance) {
			errs = append(errs, field.Invalid(field.NewPath("instance"), f.Instance, msg))
		}
		if len(f.Instance) > MaxInstanceLength {
			errs = append(errs, field.TooLong(field.NewPath("instance"), f.Instance, MaxInstanceLength))
		}
	}
	seen := map[string]int{}
	for i, ft := range f.Targets {
		p := targets.Index(i)
		t, terrs := convertTarget(p, ft)
		errs = append(errs, terrs...)
		if j, dup := seen[t.Key()]; dup {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("%s (same as targets[%d])", t.Key(), j)))
		}
		seen[t.Key()] = i
		cfg.Targets = append(cfg.Targets, t)
	}
	return cfg, errs
}

func convertTarget(p *field.Path, ft fileTarget) (Target, field.ErrorList) {
	var errs field.ErrorList
	t := Target{Kind: circuit.Kind(ft.Kind), Configuration: ft.Configuration, Webhook: ft.Webhook}
	if t.Kind == "" {
		t.Kind = circuit.KindMutating
	}
	if t.Kind != circuit.KindMutating && t.Kind != circuit.KindValidating {
		errs = append(errs, field.NotSupported(p.Child("kind"), ft.Kind, []string{string(circuit.KindMutating), string(circuit.KindValidating)}))
	}
	if ft.Configuration == "" {
		errs = append(errs, field.Required(p.Child("configuration"), "the webhook configuration's name"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(ft.Configuration) {
			errs = append(errs, field.Invalid(p.Child("configuration"), ft.Configuration, msg))
		}
	}
	if ft.Webhook == "" {
		errs = append(errs, field.Required(p.Child("webhook"), "the webhook name inside the configuration"))
	}
	t.Mode = Mode(ft.Mode)
	if t.Mode == "" {
		t.Mode = DefaultMode
	}
	if t.Mode != ModeIgnore && t.Mode != ModeBypass && t.Mode != ModeObserve {
		errs = append(errs, field.NotSupported(p.Child("mode"), ft.Mode, []string{string(ModeIgnore), string(ModeBypass), string(ModeObserve)}))
	}
	// An Observe target admits nothing without its webhook, so it needs no
	// approval; one given must still be true, so that it can stay when
	// the mode changes to Ignore or Bypass, which then require it.
	observe := t.Mode == ModeObserve
	if t.Kind == circuit.KindValidating {
		if !observe || ft.AllowAdmissionWithoutValidation != nil {
			errs = append(errs, approval(p.Child("allowAdmissionWithoutValidation"), ft.AllowAdmissionWithoutValidation, "validation",
				"requests without this webhook's validation, a security decision")...)
		}
		if ft.AllowAdmissionWithoutMutation != nil {
			errs = append(errs, field.Forbidden(p.Child("allowAdmissionWithoutMutation"), "a Validating target approves allowAdmissionWithoutValidation instead"))
		}
	} else {
		if !observe || ft.AllowAdmissionWithoutMutation != nil {
			errs = append(errs, approval(p.Child("allowAdmissionWithoutMutation"), ft.AllowAdmissionWithoutMutation, "mutation",
				"objects without this webhook's mutation")...)
		}
		if ft.AllowAdmissionWithoutValidation != nil {
			errs = append(errs, field.Forbidden(p.Child("allowAdmissionWithoutValidation"), "a Mutating target approves allowAdmissionWithoutMutation instead; set kind: Validating for a validating webhook"))
		}
	}
	t.OpenAfter = probesInARow(p.Child("openAfter"), ft.OpenAfter, DefaultOpenAfter, &errs)
	t.CloseAfter = probesInARow(p.Child("closeAfter"), ft.CloseAfter, DefaultCloseAfter, &errs)
	t.DampFlapping = ft.DampFlapping == nil || *ft.DampFlapping

	pp := p.Child("probe")
	t.Probe.Kind = ProbeKind(ft.Probe.Kind)
	if t.Probe.Kind == "" {
		t.Probe.Kind = DefaultProbeKind
	}
	switch t.Probe.Kind {
	case ProbeAdmissionReview:
		if ft.Probe.Path != "" {
			errs = append(errs, field.Invalid(pp.Child("path"), ft.Probe.Path, "only HTTPGet probes take a path; AdmissionReview probes use the webhook's own path"))
		}
	case ProbeHTTPGet:
		if !strings.HasPrefix(ft.Probe.Path, "/") {
			errs = append(errs, field.Invalid(pp.Child("path"), ft.Probe.Path, "an HTTPGet probe needs an absolute path such as /healthz"))
		}
		t.Probe.Path = ft.Probe.Path
	default:
		errs = append(errs, field.NotSupported(pp.Child("kind"), ft.Probe.Kind, []string{string(ProbeAdmissionReview), string(ProbeHTTPGet)}))
	}
	t.Probe.Interval = duration(pp.Child("interval"), ft.Probe.Interval, DefaultProbeInterval, &errs)
	if d := t.Probe.Interval; d > 0 && d < MinProbeInterval {
		errs = append(errs, field.Invalid(pp.Child("interval"), ft.Probe.Interval,
			fmt.Sprintf("must be at least %s: each webhook is probed at most %d times a second", MinProbeInterval, time.Second/MinProbeInterval)))
	}
	t.Probe.Timeout = duration(pp.Child("timeout"), ft.Probe.Timeout, 0, &errs)
	t.APIServerSignal = signal(p.Child("apiserverSignal"), ft.APIServerSignal, &errs)
	return t, errs
}

func signal(p *field.Path, f fileSignal, errs *field.ErrorList) APIServerSignal {
	s := APIServerSignal{Enabled: true, MinRequests: DefaultMinRequests, FailureRatio: DefaultFailureRatio, TrafficAsProbe: true}
	s.MinOpen = duration(p.Child("minOpen"), f.MinOpen, DefaultMinOpen, errs)
	if f.Enabled != nil {
		s.Enabled = *f.Enabled
	}
	if f.TrafficAsProbe != nil {
		s.TrafficAsProbe = *f.TrafficAsProbe
	}
	s.MinRequests = threshold(p.Child("minRequests"), f.MinRequests, DefaultMinRequests, errs)
	s.WithoutPathProbe = WithoutPathProbe(f.WithoutPathProbe)
	switch s.WithoutPathProbe {
	case "":
		s.WithoutPathProbe = WithoutPathProbeReport
	case WithoutPathProbeReport, WithoutPathProbeOpen:
	default:
		*errs = append(*errs, field.NotSupported(p.Child("withoutPathProbe"), f.WithoutPathProbe, []string{string(WithoutPathProbeReport), string(WithoutPathProbeOpen)}))
	}
	if svc := f.PathProbe.Service; svc != nil {
		sp := p.Child("pathProbe", "service")
		s.PathProbe.Service = &Service{Namespace: svc.Namespace, Name: svc.Name, Port: DefaultServicePort}
		if svc.Namespace == "" {
			*errs = append(*errs, field.Required(sp.Child("namespace"), "the namespace of the Service the webhook's clientConfig.service names"))
		}
		for _, msg := range validation.IsDNS1123Label(svc.Namespace) {
			if svc.Namespace != "" {
				*errs = append(*errs, field.Invalid(sp.Child("namespace"), svc.Namespace, msg))
			}
		}
		if svc.Name == "" {
			*errs = append(*errs, field.Required(sp.Child("name"), "the name of the Service the webhook's clientConfig.service names"))
		}
		for _, msg := range validation.IsDNS1035Label(svc.Name) {
			if svc.Name != "" {
				*errs = append(*errs, field.Invalid(sp.Child("name"), svc.Name, msg))
			}
		}
		if svc.Port != nil {
			s.PathProbe.Service.Port = *svc.Port
			for _, msg := range validation.IsValidPortNum(int(*svc.Port)) {
				*errs = append(*errs, field.Invalid(sp.Child("port"), *svc.Port, msg))
			}
		}
	}
	if f.FailureRatio != nil {
		s.FailureRatio = *f.FailureRatio
		if !(s.FailureRatio > 0 && s.FailureRatio <= 1) {
			*errs = append(*errs, field.Invalid(p.Child("failureRatio"), s.FailureRatio, "must be more than 0 and at most 1, the share of failed calls, such as 0.5"))
		}
	}
	return s
}

// approval checks the explicit opt-in a target of each kind needs.
func approval(p *field.Path, v *bool, what, admits string) field.ErrorList {
	switch {
	case v == nil:
		return field.ErrorList{field.Required(p, "must be true: opening the circuit admits "+admits+", and only an operator can approve that")}
	case !*v:
		return field.ErrorList{field.Invalid(p, false, "must be true: a webhook whose "+what+" is required must not be listed as a target")}
	}
	return nil
}

func threshold(p *field.Path, v *int, def int, errs *field.ErrorList) int {
	if v == nil {
		return def
	}
	if *v < 1 {
		*errs = append(*errs, field.Invalid(p, *v, "must be at least 1"))
	}
	return *v
}

// probesInARow is a threshold of consecutive probes (openAfter,
// closeAfter), at most MaxProbesInARow.
func probesInARow(p *field.Path, v *int, def int, errs *field.ErrorList) int {
	n := threshold(p, v, def, errs)
	if n > MaxProbesInARow {
		*errs = append(*errs, field.Invalid(p, n,
			fmt.Sprintf("must be at most %d: up to that many probes of one webhook are in flight at once", MaxProbesInARow)))
	}
	return n
}

func duration(p *field.Path, s string, def time.Duration, errs *field.ErrorList) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		*errs = append(*errs, field.Invalid(p, s, "not a duration such as 250ms or 1s"))
		return def
	}
	if d <= 0 {
		*errs = append(*errs, field.Invalid(p, s, "must be positive"))
	}
	return d
}
