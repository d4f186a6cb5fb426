package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

var randReader = rand.Reader

// procStatusKiB reads a "Name:  123 kB" field of /proc/self/status, in KiB (0 when unavailable).
func procStatusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, field+":") {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, field+":"))
		if len(fields) == 0 {
			return 0
		}
		v, _ := strconv.ParseInt(fields[0], 10, 64)
		return v
	}
	return 0
}

// heapSampler records the peak of the Go heap in use and of the memory the Go runtime obtained from
// the system, sampled every 100 ms (the runtime keeps no peak itself). With profile set, it also
// keeps the heap profile of the moment the heap in use was highest (captured whenever the peak grows
// by 10 %): its in-use figures are those of the last collection before the peak, i.e. the live heap
// that set the collector's goal then.
type heapSampler struct {
	mu                sync.Mutex
	peakHeap, peakSys uint64
	profile           bool
	profiledAt        uint64
	peakProfile       []byte
	stop              chan struct{}
	done              chan struct{}
}

func startHeapSampler(profile bool) *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{}), profile: profile}
	go func() {
		defer close(h.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			h.sample()
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) sample() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.mu.Lock()
	h.peakHeap = max(h.peakHeap, m.HeapInuse)
	h.peakSys = max(h.peakSys, m.Sys)
	capture := h.profile && m.HeapInuse > h.profiledAt+h.profiledAt/10
	if capture {
		h.profiledAt = m.HeapInuse
	}
	h.mu.Unlock()
	if capture {
		var b bytes.Buffer
		if pprof.Lookup("heap").WriteTo(&b, 0) == nil {
			h.mu.Lock()
			h.peakProfile = b.Bytes()
			h.mu.Unlock()
		}
	}
}

// PeakProfile returns the heap profile taken at the peak (nil without profile).
func (h *heapSampler) PeakProfile() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peakProfile
}

// Stop stops sampling and returns the peaks in bytes.
func (h *heapSampler) Stop() (heap, sys uint64) {
	close(h.stop)
	<-h.done
	h.sample()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peakHeap, h.peakSys
}

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
