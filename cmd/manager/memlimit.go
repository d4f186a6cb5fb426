package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
)

// EnvMemoryLimit is the environment variable that carries the container's memory limit in bytes
// (config/manager/manager.yaml sets it from limits.memory through the downward API).
const EnvMemoryLimit = "MEMORY_LIMIT"

// setMemoryLimit gives the Go runtime a soft memory limit of ratio times the container's limit,
// so that the garbage collector works harder as the process nears the limit instead of the kernel
// killing it there. The rest of the limit is headroom for what the soft limit cannot steer in time
// (a burst of allocations between two collections). GOMEMLIMIT, when set, wins: the runtime has
// read it already. It returns the limit set (0 when none) for the log.
func setMemoryLimit(ratio float64) (int64, error) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), nil
	}
	v := os.Getenv(EnvMemoryLimit)
	if v == "" {
		return 0, nil
	}
	limit, err := strconv.ParseInt(v, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("$%s=%q is not a memory limit in bytes", EnvMemoryLimit, v)
	}
	if ratio <= 0 || ratio > 1 {
		return 0, fmt.Errorf("--memory-limit-ratio=%v: want a ratio in (0, 1]", ratio)
	}
	soft := int64(float64(limit) * ratio)
	debug.SetMemoryLimit(soft)
	return soft, nil
}
