package harness

import (
	"fmt"
	"sort"
	"strings"
)

// ServedKinds is what the apiserver serves by discovery, as Helm's
// .Capabilities.APIVersions holds it on "helm install": every group version
// ("apps/v1", "v1") and every kind of it ("apps/v1/Deployment"), sorted.
// Subresources are left out.
func (e *Env) ServedKinds() ([]string, error) {
	_, lists, err := e.Clientset.Discovery().ServerGroupsAndResources()
	if err != nil {
		return nil, fmt.Errorf("discovering the served APIs: %w", err)
	}
	seen := map[string]bool{}
	for _, list := range lists {
		seen[list.GroupVersion] = true
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			seen[list.GroupVersion+"/"+r.Kind] = true
		}
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}
