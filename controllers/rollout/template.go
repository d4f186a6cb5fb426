package rollout

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// TemplateDiff returns the paths under spec.template in which applying the workload desired (the
// operator's rendered intent, as JSON-like maps) would change the live one: values desired sets that
// live lacks or holds otherwise, and fields the operator set before (owned, its field set on the live
// object: managedFields[].fieldsV1 of its apply, nil when unknown) that desired no longer sets. The
// paths are sorted and readable, e.g. spec.template.metadata.annotations[example.org/build],
// spec.template.spec.containers[tiled].env[TILED_X].value. A value desired sets that the API server
// defaulted to the same thing in live is no difference; an empty map or list in desired matches an
// absent one. It is pure; neither argument is modified.
func TemplateDiff(desired, live map[string]any, owned []byte) ([]string, error) {
	d, err := normalize(nested(desired, "spec", "template"))
	if err != nil {
		return nil, err
	}
	l, err := normalize(nested(live, "spec", "template"))
	if err != nil {
		return nil, err
	}
	found := map[string]bool{}
	changed(d, l, "spec.template", "", found)
	if len(owned) > 0 {
		var fields map[string]any
		if err := json.Unmarshal(owned, &fields); err != nil {
			return nil, fmt.Errorf("reading the operator's field set: %w", err)
		}
		if t, ok := nested(fields, "f:spec", "f:template").(map[string]any); ok {
			removed(t, d, "spec.template", "", found)
		}
	}
	out := make([]string, 0, len(found))
	for p := range found {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// nested is the value at path in m, nil when absent.
func nested(m map[string]any, path ...string) any {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// normalize gives v the types encoding/json decodes to (numbers float64), so that values built in
// code compare equal to values read from the API server.
func normalize(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(data, &out)
}

// bracketed are the maps whose keys are names (label, annotation keys): written [key], not .key.
var bracketed = map[string]bool{"annotations": true, "labels": true, "nodeSelector": true, "matchLabels": true, "limits": true, "requests": true}

// child is the path of field k of the object at path (field is the name of that object's own field).
func child(path, field, k string) string {
	if bracketed[field] {
		return path + "[" + k + "]"
	}
	return path + "." + k
}

// listKey is the key a list's item is known by (a container's or variable's name, a mount's path,
// a port's number), "" when it has none: such lists compare whole.
func listKey(item any) string {
	m, ok := item.(map[string]any)
	if !ok {
		return ""
	}
	for _, k := range []string{"name", "mountPath", "devicePath", "containerPort"} {
		switch v := m[k].(type) {
		case string:
			return v
		case float64:
			return fmt.Sprint(v)
		}
	}
	return ""
}

func empty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}

// changed records in found the paths where d sets something that l does not hold.
func changed(d, l any, path, field string, found map[string]bool) {
	switch dv := d.(type) {
	case map[string]any:
		lv, _ := l.(map[string]any)
		for k, v := range dv {
			if lv == nil || lv[k] == nil {
				if !empty(v) {
					found[child(path, field, k)] = true
				}
				continue
			}
			changed(v, lv[k], child(path, field, k), k, found)
		}
	case []any:
		lv, _ := l.([]any)
		if len(dv) > 0 && listKey(dv[0]) != "" {
			byKey := map[string]any{}
			for _, item := range lv {
				byKey[listKey(item)] = item
			}
			for _, item := range dv {
				k := listKey(item)
				p := path + "[" + k + "]"
				if li, ok := byKey[k]; ok {
					changed(item, li, p, "", found)
				} else {
					found[p] = true
				}
			}
			return
		}
		if (!empty(dv) || !empty(lv)) && !reflect.DeepEqual(dv, lv) {
			found[path] = true
		}
	default:
		if !reflect.DeepEqual(d, l) {
			found[path] = true
		}
	}
}

// removed records in found the paths of the field set fs (managedFields' fieldsV1 format: "f:name"
// fields, "k:{...}" list items by key, "v:..." set items, "." the object itself) that d does not
// hold.
func removed(fs map[string]any, d any, path, field string, found map[string]bool) {
	for k, sub := range fs {
		subset, _ := sub.(map[string]any)
		switch {
		case strings.HasPrefix(k, "f:"):
			name := k[2:]
			dm, _ := d.(map[string]any)
			v, ok := dm[name]
			if !ok {
				found[child(path, field, name)] = true
				continue
			}
			removed(subset, v, child(path, field, name), name, found)
		case strings.HasPrefix(k, "k:"):
			var key map[string]any
			if json.Unmarshal([]byte(k[2:]), &key) != nil {
				continue
			}
			item, label := itemByKey(d, key)
			p := path + "[" + label + "]"
			if item == nil {
				found[p] = true
				continue
			}
			removed(subset, item, p, "", found)
		}
	}
}

// itemByKey finds the item of list d whose fields hold key, and names the key.
func itemByKey(d any, key map[string]any) (any, string) {
	names := make([]string, 0, len(key))
	for k := range key {
		names = append(names, k)
	}
	sort.Strings(names)
	vals := make([]string, len(names))
	for i, n := range names {
		vals[i] = fmt.Sprint(key[n])
	}
	label := strings.Join(vals, ",")
	list, _ := d.([]any)
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		match := true
		for n, v := range key {
			if !reflect.DeepEqual(m[n], v) {
				match = false
				break
			}
		}
		if match {
			return item, label
		}
	}
	return nil, label
}
