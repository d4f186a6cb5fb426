package e2e

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// userHz is the unit of /proc's CPU times (USER_HZ, 100 on Linux everywhere).
const userHz = 100

// parseProcStat returns utime+stime+cutime+cstime of a /proc/<pid>/stat line, in seconds.
func parseProcStat(s string) (float64, bool) {
	// The command name (field 2) is in parentheses and may hold spaces and parentheses: count
	// from after the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime, stime, cutime, cstime are fields 14 to 17.
	if len(f) < 15 {
		return 0, false
	}
	var sum float64
	for _, x := range f[11:15] {
		v, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, false
		}
		sum += v
	}
	return sum / userHz, true
}

// parseMachineBusy returns the CPU seconds of /proc/stat's first line ("cpu", all cores) that were
// neither idle nor waiting for I/O (guest time is counted in user already).
func parseMachineBusy(stat string) (float64, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q is not the cpu line", line)
	}
	var busy float64
	// user nice system idle iowait irq softirq steal guest guest_nice
	for i, x := range f[1:] {
		v, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		busy += v
	}
	return busy / userHz, nil
}

// NamesByValue returns the keys of m, the largest value first (ties by name): the order in which
// the suite's summary and the figures page list CPU seconds.
func NamesByValue(m map[string]float64) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		return m[names[i]] > m[names[j]] || (m[names[i]] == m[names[j]] && names[i] < names[j])
	})
	return names
}

// topN keeps the n entries of m with the largest values (ties by name).
func topN(m map[string]float64, n int) map[string]float64 {
	names := NamesByValue(m)
	out := map[string]float64{}
	for _, k := range names[:min(n, len(names))] {
		out[k] = m[k]
	}
	return out
}
