package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The README's generated table lies between these two lines.
const (
	Begin = `<!-- values:begin (generated from values.yaml by "make docs"; do not edit) -->`
	End   = `<!-- values:end -->`
)

// Row is one key of values.yaml.
type Row struct {
	// Path is the key's dotted path, "image.tag".
	Path string
	// Type is the key's type: the schema's when it says, else the
	// default's (bool, int, float, string, list, object).
	Type string
	// Default is the default value as JSON; empty for a map with keys
	// of its own, which have rows of their own.
	Default string
	// Description is the comment block right above the key, or, for a
	// key without one, the comment of the sibling right above it (keys
	// listed together share one comment).
	Description string
	// commented: the key has a comment block of its own.
	commented bool
}

var keyLine = regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):(?:\s|$)`)

// keys lists values.yaml's keys in their order with their comments. List
// items, and what they hold, belong to their list's key.
func keys(text string) []Row {
	var rows []Row
	var stack []string
	var pending []string
	shared := map[int]string{} // by depth: the comment of the sibling above
	list := -1                 // the indentation of the list we are in; -1: none
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if list >= 0 && trimmed != "" && !strings.HasPrefix(trimmed, "#") && (indent > list || indent == list && strings.HasPrefix(trimmed, "- ")) {
			continue
		}
		switch {
		case strings.HasPrefix(trimmed, "- "):
			list, pending = indent, nil
			continue
		case strings.HasPrefix(trimmed, "#"):
			pending = append(pending, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		case trimmed == "":
			pending = nil
			clear(shared)
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			pending = nil
			continue
		}
		list = -1
		depth := len(m[1]) / 2
		if depth > len(stack) {
			pending = nil
			continue
		}
		stack = append(stack[:depth], m[2])
		for d := range shared {
			if d > depth {
				delete(shared, d)
			}
		}
		if len(pending) > 0 {
			shared[depth] = strings.Join(pending, " ")
		}
		rows = append(rows, Row{Path: strings.Join(stack, "."), Description: shared[depth], commented: len(pending) > 0})
		pending = nil
	}
	return rows
}

// Rows are values.yaml's keys with their types, defaults and
// descriptions; schema is values.schema.json. A map whose keys have no
// comment of their own (a Kubernetes object passed through, such as
// resources) is one row, with the whole map as its default; any other map
// has a row when it has a comment, and its keys have theirs. A value
// without a description is an error: every value is documented.
func Rows(values, schema []byte) ([]Row, error) {
	parsed := map[string]any{}
	if err := yaml.Unmarshal(values, &parsed); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	var s map[string]any
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	all := keys(string(values))
	var rows []Row
	var missing []string
	for i := 0; i < len(all); i++ {
		r := all[i]
		v, ok := valueAt(parsed, r.Path)
		if !ok {
			return nil, fmt.Errorf("values.yaml: %s: not found in the parsed values", r.Path)
		}
		end := i + 1 // past the map's keys
		for end < len(all) && strings.HasPrefix(all[end].Path, r.Path+".") {
			end++
		}
		parent := end > i+1
		if parent && !slices.ContainsFunc(all[i+1:end], func(k Row) bool { return k.commented }) {
			parent = false // one row for the whole map
			i = end - 1
		}
		if parent && r.Description == "" {
			continue
		}
		r.Type = schemaType(s, r.Path)
		if r.Type == "" {
			r.Type = typeOf(v)
		}
		if !parent {
			def, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			r.Default = string(def)
		}
		if r.Description == "" {
			missing = append(missing, r.Path)
		}
		rows = append(rows, r)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("values.yaml: no comment above %s", strings.Join(missing, ", "))
	}
	return rows, nil
}

func valueAt(values map[string]any, path string) (any, bool) {
	var v any = values
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// typeOf names the type of a default value as helm-docs does.
func typeOf(v any) string {
	switch v := v.(type) {
	case bool:
		return "bool"
	case float64:
		if v == float64(int64(v)) {
			return "int"
		}
		return "float"
	case string:
		return "string"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return ""
}

// schemaType is the type values.schema.json gives the value at path, ""
// when it gives none: "int", or "int or null".
func schemaType(schema map[string]any, path string) string {
	node := schema
	for _, k := range strings.Split(path, ".") {
		node = resolve(schema, node)
		props, _ := node["properties"].(map[string]any)
		next, ok := props[k].(map[string]any)
		if !ok {
			return ""
		}
		node = next
	}
	var types []string
	schemaTypes(schema, node, &types)
	// null last: "int or null".
	if i := slices.Index(types, "null"); i >= 0 {
		types = append(slices.Delete(types, i, i+1), "null")
	}
	return strings.Join(types, " or ")
}

// schemaTypes adds the types node allows, directly or through oneOf and
// anyOf, to types, without repeats.
func schemaTypes(schema, node map[string]any, types *[]string) {
	names := map[string]string{"boolean": "bool", "integer": "int", "number": "float", "string": "string", "array": "list", "object": "object", "null": "null"}
	add := func(t any) {
		if s, ok := t.(string); ok && !slices.Contains(*types, names[s]) {
			*types = append(*types, names[s])
		}
	}
	node = resolve(schema, node)
	switch t := node["type"].(type) {
	case string:
		add(t)
	case []any:
		for _, x := range t {
			add(x)
		}
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		subs, _ := node[k].([]any)
		for _, sub := range subs {
			if m, ok := sub.(map[string]any); ok {
				schemaTypes(schema, m, types)
			}
		}
	}
}

// resolve follows a local "$ref" ("#/definitions/target").
func resolve(schema, node map[string]any) map[string]any {
	ref, ok := node["$ref"].(string)
	if !ok || !strings.HasPrefix(ref, "#/") {
		return node
	}
	var v any = schema
	for _, k := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	if m, ok := v.(map[string]any); ok {
		return m
	}
	return node
}

// Table is the Markdown table of rows, between Begin and End.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString(Begin + "\n")
	b.WriteString("| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n")
	for _, r := range rows {
		def := ""
		if r.Default != "" {
			def = "`" + cell(r.Default) + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Path, r.Type, def, cell(escape(r.Description)))
	}
	b.WriteString(End)
	return b.String()
}

// cell makes s safe inside a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// escape keeps a comment's <placeholders> visible in Markdown.
func escape(s string) string {
	return strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(s)
}

// Update returns readme with its generated table replaced by table.
func Update(readme, table string) (string, error) {
	begin := strings.Index(readme, Begin)
	end := strings.Index(readme, End)
	if begin < 0 || end < begin {
		return "", fmt.Errorf("README.md has no table between %q and %q", Begin, End)
	}
	return readme[:begin] + table + readme[end+len(End):], nil
}
