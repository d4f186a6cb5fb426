package main

import (
	"crypto/rand"
	"os"
	"strconv"
	"strings"
)

var randReader = rand.Reader

// procMemTotalKiB is the machine's memory (MemTotal of /proc/meminfo), in KiB.
func procMemTotalKiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

func itoa(v int) string { return strconv.Itoa(v) }

func fmtGiB(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " GiB" }
