// Package dedupe gives values that hold equal parts one copy of each part.
//
// A TiledInstance holds its whole expanded spec, and the instances of a fleet are expanded from the
// same built-in defaults and profiles: most of one instance's spec equals every other's (the Tiled
// container's resources, probes, security settings, the database template…), and only a few leaves
// differ (paths and hosts computed from the instance's name, an override). Decoding or expanding
// gives every instance its own copy of every part: at a thousand instances, ~12 MB of maps (a
// resource list is a 640-byte map) and pointed-to structs, in the informer cache and again in the
// cluster controller's expansion while a rollout holds it. A Table gives the values shared through
// it one copy of every part they hold equal — every pointer, map and slice, compared by content,
// deepest first, so that a part holding one leaf of its own still shares its other parts.
//
// The parts are never to be written: a value shared through a Table is read only, as are the parts
// of every other value shared through it (the informer cache hands out deep copies, and its
// read-only users — lists with UnsafeDisableDeepCopy, the event handlers — only read). A Table holds
// the parts it hands out by their digest (type and content), at most MaxParts of them: then it starts
// over (the parts already shared stay with their holders; those of values gone since are let go), so
// it neither grows without bound nor needs to count its holders.
package dedupe

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"math"
	"reflect"
	"slices"
	"sync"
)

// Table holds the parts handed out (see the package comment). Its zero value is not usable: New.
type Table struct {
	mu    sync.Mutex
	parts map[partKey]reflect.Value
}

type partKey struct {
	typ    reflect.Type
	digest [sha256.Size]byte
}

// MaxParts bounds a table: a fleet of a few profiles has a few hundred distinct parts.
const MaxParts = 1 << 14

// New returns an empty table.
func New() *Table { return &Table{parts: map[partKey]reflect.Value{}} }

// Share replaces, in the value v points to, every pointer, map and slice with the table's copy of an
// equal one, when it has one, and files the others. v is read only from then on.
func (t *Table) Share(v any) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.digest(rv.Elem(), sha256.New())
}

// digest writes a digest of v's content to h, after sharing v's parts (v is addressable, or a map
// value, which is not walked into: see below). It returns false when v holds what it cannot tell the
// content of (an interface, a channel, a function): then v, and every part holding it, stays its
// own.
func (t *Table) digest(v reflect.Value, h hash.Hash) bool {
	var buf [8]byte
	num := func(x uint64) { binary.LittleEndian.PutUint64(buf[:], x); h.Write(buf[:]) }
	switch v.Kind() {
	case reflect.String:
		num(uint64(v.Len()))
		h.Write([]byte(v.String()))
	case reflect.Bool:
		if v.Bool() {
			num(1)
		} else {
			num(0)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		num(uint64(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		num(v.Uint())
	case reflect.Float32, reflect.Float64:
		num(math.Float64bits(v.Float()))
	case reflect.Struct:
		if opaque(v.Type()) {
			// A type with unexported fields (resource.Quantity, metav1.Time): by its encoding.
			b, err := json.Marshal(v.Interface())
			if err != nil {
				return false
			}
			num(uint64(len(b)))
			h.Write(b)
			return true
		}
		ok := true
		for i := range v.NumField() {
			num(uint64(i))
			ok = t.digest(v.Field(i), h) && ok
		}
		return ok
	case reflect.Pointer, reflect.Map, reflect.Slice:
		if v.IsNil() {
			num(0)
			return true
		}
		num(1)
		sub := sha256.New()
		if !t.part(v, sub) {
			return false
		}
		key := partKey{typ: v.Type()}
		sub.Sum(key.digest[:0])
		h.Write(key.digest[:])
		if shared, ok := t.parts[key]; ok {
			if v.CanSet() {
				v.Set(shared)
			}
			return true
		}
		if len(t.parts) >= MaxParts {
			clear(t.parts)
		}
		// A copy of the pointer, map or slice: not the field that holds it (which would keep the
		// whole instance alive with the table).
		t.parts[key] = reflect.ValueOf(v.Interface())
		return true
	default:
		return false
	}
	return true
}

// part writes the digest of the content of the pointer, map or slice v to h, sharing its parts.
func (t *Table) part(v reflect.Value, h hash.Hash) bool {
	switch v.Kind() {
	case reflect.Pointer:
		return t.digest(v.Elem(), h)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			h.Write(v.Bytes())
			return true
		}
		ok := true
		for i := range v.Len() {
			ok = t.digest(v.Index(i), h) && ok
		}
		return ok
	default: // a map: its entries sorted by key; the values are copies, shared and put back
		keys := v.MapKeys()
		if v.Type().Key().Kind() != reflect.String {
			return false
		}
		slices.SortFunc(keys, func(a, b reflect.Value) int {
			switch {
			case a.String() < b.String():
				return -1
			case a.String() > b.String():
				return 1
			}
			return 0
		})
		// Values that may hold parts are walked in a copy, put back once shared; the others (strings,
		// resource quantities) are only read.
		holdsParts := false
		switch e := v.Type().Elem(); e.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice:
			holdsParts = true
		case reflect.Struct:
			holdsParts = !opaque(e)
		}
		ok := true
		for _, k := range keys {
			t.digest(k, h)
			val := reflect.New(v.Type().Elem()).Elem()
			val.Set(v.MapIndex(k))
			ok = t.digest(val, h) && ok
			if holdsParts {
				v.SetMapIndex(k, val)
			}
		}
		return ok
	}
}

// opaque says whether a struct type has unexported fields, which reflection may not set.
func opaque(t reflect.Type) bool {
	for i := range t.NumField() {
		if !t.Field(i).IsExported() {
			return true
		}
	}
	return false
}
