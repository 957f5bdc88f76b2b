package admission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// MarshalManifest renders objs as YAML documents separated by "---". Every
// object must have its TypeMeta (apiVersion and kind) set. An empty status
// is left out.
func MarshalManifest(objs ...runtime.Object) ([]byte, error) {
	var docs []string
	for i, obj := range objs {
		if obj == nil {
			return nil, fmt.Errorf("manifest object %d is nil", i)
		}
		gvk := obj.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" || gvk.Version == "" {
			return nil, fmt.Errorf("manifest object %d (%T) has no apiVersion/kind set", i, obj)
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", gvk.Kind, err)
		}
		var fields map[string]any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&fields); err != nil {
			return nil, fmt.Errorf("marshal %s: %w", gvk.Kind, err)
		}
		if status, ok := fields["status"].(map[string]any); ok && len(status) == 0 {
			delete(fields, "status")
		}
		doc, err := yaml.Marshal(fields)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", gvk.Kind, err)
		}
		docs = append(docs, string(doc))
	}
	return []byte(strings.Join(docs, "---\n")), nil
}
