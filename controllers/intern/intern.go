// Package intern gives the equal strings the manager keeps for long (in its informer caches and the
// applier's records) one copy between them.
//
// unique.Make(s).Value() does not: the unique package forgets a string once the last Handle to it
// is gone, at the next collection, and callers that keep the string, not the Handle, get a new copy
// for every equal string interned after that. Through a stamp-out the collector runs several times
// a second, so the children of one instance (whose owner references name the same instance and UID)
// and the records of one owner ended up with a copy each instead of one among them.
//
// This table holds its strings itself. The strings worth interning repeat across a fleet (owner
// names and UIDs, label keys and values, managers, namespaces), so a thousand instances need a few
// thousand entries; a table grown to MaxStrings (strings of objects deleted since, values that never
// repeat) starts over empty instead of growing further — the strings already handed out stay valid,
// equal strings interned after that only get a new shared copy.
package intern

import (
	"strings"
	"sync"
)

// MaxStrings is how many strings the table holds before it starts over.
const MaxStrings = 1 << 16

var table = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// String returns the table's copy of s, making one (of s's bytes alone: s may be part of a larger
// buffer, which the copy does not keep alive) if it has none.
func String(s string) string {
	if s == "" {
		return ""
	}
	table.Lock()
	defer table.Unlock()
	if v, ok := table.m[s]; ok {
		return v
	}
	if len(table.m) >= MaxStrings {
		clear(table.m)
	}
	v := strings.Clone(s)
	table.m[v] = v
	return v
}

// Len is the number of strings the table holds.
func Len() int {
	table.Lock()
	defer table.Unlock()
	return len(table.m)
}
