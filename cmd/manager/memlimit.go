package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/bluesky/tiled-operator/operator/memtarget"
)

// EnvMemoryLimit and EnvMemoryRequest are the environment variables that carry the container's
// memory limit and request in bytes (config/manager/manager.yaml sets them from limits.memory and
// requests.memory through the downward API).
const (
	EnvMemoryLimit   = "MEMORY_LIMIT"
	EnvMemoryRequest = "MEMORY_REQUEST"
)

// memorySettings works out the bounds of the Go runtime's soft memory limit (package memtarget):
// the ceiling is limitRatio of the container's limit, so that the garbage collector works harder as
// the process nears the limit instead of the kernel killing it there (the rest is headroom for what
// the soft limit cannot steer in time); the target is targetRatio of the container's request. With
// GOMEMLIMIT set, nothing is steered (ok is false): the runtime has read it already.
func memorySettings(limitRatio, targetRatio float64) (s memtarget.Settings, ok bool, err error) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return s, false, nil
	}
	if limitRatio <= 0 || limitRatio > 1 {
		return s, false, fmt.Errorf("--memory-limit-ratio=%v: want a ratio in (0, 1]", limitRatio)
	}
	if targetRatio < 0 || targetRatio > 1 {
		return s, false, fmt.Errorf("--memory-target-ratio=%v: want a ratio in [0, 1] (0 steers nothing)", targetRatio)
	}
	limit, err := bytesFromEnv(EnvMemoryLimit)
	if err != nil {
		return s, false, err
	}
	request, err := bytesFromEnv(EnvMemoryRequest)
	if err != nil {
		return s, false, err
	}
	s = memtarget.Settings{
		Ceiling:     int64(float64(limit) * limitRatio),
		Target:      int64(float64(request) * targetRatio),
		Headroom:    memtarget.DefaultHeadroom,
		MaxHeadroom: memtarget.DefaultMaxHeadroom,
		GCBudget:    memtarget.DefaultGCBudget,
	}
	if s.Ceiling > 0 && s.Target > s.Ceiling {
		s.Target = s.Ceiling
	}
	return s, s.Ceiling > 0 || s.Target > 0, nil
}

// bytesFromEnv reads a quantity in bytes from the environment variable name (0 when unset).
func bytesFromEnv(name string) (int64, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("$%s=%q is not a quantity of memory in bytes", name, v)
	}
	return n, nil
}
