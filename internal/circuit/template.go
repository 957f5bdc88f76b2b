package circuit

import (
	"bytes"
	"encoding/json"
)

// The chart renders the guard policy and the marking policies from JSON
// templates (files/policy.json, files/marking.json) that the guard writes
// from the objects it renders; both templates are written this way.

// ObjectJSON is obj as a JSON object, as "guard manifests" writes it:
// without an empty status.
func ObjectJSON(obj any) (map[string]any, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	if status, ok := out["status"].(map[string]any); ok && len(status) == 0 {
		delete(out, "status")
	}
	return out, nil
}

// IndentJSON encodes v indented by two spaces, readable: "&&" as it is,
// not \u0026\u0026.
func IndentJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
