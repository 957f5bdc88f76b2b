package harness

import (
	"fmt"
	"os"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
)

// ShippedLeaseNamespace is the --leader-election-namespace of the kustomize
// base's Deployment, which install.yaml and the chart share: kube-system,
// which policy engines' webhooks leave out.
func ShippedLeaseNamespace() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "kustomize", "base", "deployment.yaml"))
	if err != nil {
		return "", err
	}
	d := &appsv1.Deployment{}
	if err := yaml.Unmarshal(data, d); err != nil {
		return "", err
	}
	ns, ok := factory.LeaseNamespaceOf(d)
	if !ok {
		return "", fmt.Errorf("the shipped Deployment does not say where its Lease is")
	}
	return ns, nil
}
