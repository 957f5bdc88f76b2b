package harness

import (
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"
)

// FastConfig shortens an installed GuardConfiguration's timings so a test
// does not wait for production intervals: probes every 100ms, open after
// 2 failures, close after 2 successes, kube-apiserver's /metrics read
// every second. Everything else (targets, modes,
// probe kinds) is the installed configuration.
func FastConfig(installed string) (string, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(installed), &cfg); err != nil {
		return "", fmt.Errorf("reading the installed configuration: %w", err)
	}
	targets, ok := cfg["targets"].([]any)
	if !ok {
		return "", errors.New("the installed configuration has no targets list")
	}
	for _, raw := range targets {
		target, ok := raw.(map[string]any)
		if !ok {
			return "", fmt.Errorf("a target is not an object: %v", raw)
		}
		target["openAfter"], target["closeAfter"] = 2, 2
		probe, _ := target["probe"].(map[string]any)
		if probe == nil {
			probe = map[string]any{}
		}
		probe["interval"] = "100ms"
		target["probe"] = probe
	}
	cfg["apiserverScrapeInterval"] = "1s"
	out, err := yaml.Marshal(cfg)
	return string(out), err
}
