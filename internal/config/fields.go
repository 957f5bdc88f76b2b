package config

import (
	"reflect"
	"strings"
)

// FieldPaths returns the path of every leaf field of the file format, in
// declaration order: "holdWhenAllFail", "targets[].probe.interval",
// "targets[].apiserverSignal.pathProbe.service.port". A path goes through
// objects with ".", and through lists with "[]." (each item has the
// fields). It is derived from the JSON names of the file's types, so a
// field added to the format is listed with no other change, and whatever
// must carry every field (the Helm chart's schema and template) can be
// tested against it.
func FieldPaths() []string {
	return fieldPaths(reflect.TypeFor[file](), "")
}

func fieldPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			out = append(out, fieldPaths(ft, path+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, fieldPaths(ft.Elem(), path+"[].")...)
		default:
			out = append(out, path)
		}
	}
	return out
}
