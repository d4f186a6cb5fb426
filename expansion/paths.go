package expansion

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// Paths are rendered for people: dot-separated field names without a leading dot
// (spec.storage.data.size), keyed list items as [key=value] (spec.tiled.env[name=FOO].value, several
// keys comma-separated), and map keys that are not plain identifiers in brackets and quotes
// (spec.tiled.nodeSelector["kubernetes.io/hostname"]).

var plainName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func renderName(b *strings.Builder, name string) {
	if plainName.MatchString(name) {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(name)
		return
	}
	b.WriteByte('[')
	b.WriteString(strconv.Quote(name))
	b.WriteByte(']')
}

func renderKeyValue(v any) string {
	if s, ok := v.(string); ok {
		if strings.ContainsAny(s, "[],=\"") {
			return strconv.Quote(s)
		}
		return s
	}
	return value.ToString(value.NewValueInterface(v))
}

// renderPath renders an SMD path in the provenance format.
func renderPath(p fieldpath.Path) string {
	var b strings.Builder
	for _, pe := range p {
		switch {
		case pe.FieldName != nil:
			renderName(&b, *pe.FieldName)
		case pe.Key != nil:
			b.WriteByte('[')
			for i, f := range *pe.Key {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(f.Name)
				b.WriteByte('=')
				b.WriteString(renderKeyValue(f.Value.Unstructured()))
			}
			b.WriteByte(']')
		case pe.Value != nil:
			fmt.Fprintf(&b, "[=%s]", renderKeyValue((*pe.Value).Unstructured()))
		case pe.Index != nil:
			fmt.Fprintf(&b, "[%d]", *pe.Index)
		}
	}
	return b.String()
}

// site is one concrete object of an unstructured value that matches a schema pattern such as
// spec.storage.readOnlyMounts[].nfs.
type site struct {
	obj  map[string]any
	path fieldpath.Path
}

// visit calls fn for every object of root matching pattern (segments separated by dots; a segment
// ending in [] is a list whose every item is visited). listKeys gives the key fields of keyed lists
// by pattern, for the SMD paths of their items.
func visit(root map[string]any, pattern string, listKeys map[string][]string, fn func(site)) {
	segs := strings.Split(pattern, ".")
	var walk func(obj map[string]any, i int, prefix string, path fieldpath.Path)
	walk = func(obj map[string]any, i int, prefix string, path fieldpath.Path) {
		if i == len(segs) {
			fn(site{obj: obj, path: path})
			return
		}
		seg := segs[i]
		name, isList := strings.CutSuffix(seg, "[]")
		if prefix != "" {
			prefix += "."
		}
		prefix += name
		child, ok := obj[name]
		if !ok || child == nil {
			return
		}
		p := childPath(path, name)
		if !isList {
			if m, ok := child.(map[string]any); ok {
				walk(m, i+1, prefix, p)
			}
			return
		}
		items, _ := child.([]any)
		keys := listKeys[prefix]
		for idx, item := range items {
			m, ok := item.(map[string]any)
			if !ok {
				continue
			}
			var pe fieldpath.PathElement
			if len(keys) > 0 {
				fl := make(value.FieldList, 0, len(keys))
				for _, k := range keys {
					fl = append(fl, value.Field{Name: k, Value: value.NewValueInterface(m[k])})
				}
				fl.Sort()
				pe = fieldpath.PathElement{Key: &fl}
			} else {
				pe = fieldpath.PathElement{Index: &idx}
			}
			walk(m, i+1, prefix+"[]", append(p[:len(p):len(p)], pe))
		}
	}
	walk(root, 0, "", nil)
}

// child returns path extended by one field name, without aliasing path's array.
func childPath(path fieldpath.Path, name string) fieldpath.Path {
	n := name
	return append(path[:len(path):len(path)], fieldpath.PathElement{FieldName: &n})
}

// lookup returns the value at path in an unstructured value.
func lookup(v any, path fieldpath.Path) any {
	for _, pe := range path {
		switch {
		case pe.FieldName != nil:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			if v, ok = m[*pe.FieldName]; !ok {
				return nil
			}
		case pe.Key != nil:
			items, ok := v.([]any)
			if !ok {
				return nil
			}
			found := false
			for _, item := range items {
				m, ok := item.(map[string]any)
				if !ok {
					continue
				}
				match := true
				for _, f := range *pe.Key {
					if !value.Equals(value.NewValueInterface(m[f.Name]), f.Value) {
						match = false
						break
					}
				}
				if match {
					v, found = m, true
					break
				}
			}
			if !found {
				return nil
			}
		case pe.Value != nil:
			items, ok := v.([]any)
			if !ok {
				return nil
			}
			found := false
			for _, item := range items {
				if value.Equals(value.NewValueInterface(item), *pe.Value) {
					v, found = item, true
					break
				}
			}
			if !found {
				return nil
			}
		case pe.Index != nil:
			items, ok := v.([]any)
			if !ok || *pe.Index >= len(items) {
				return nil
			}
			v = items[*pe.Index]
		}
	}
	return v
}
