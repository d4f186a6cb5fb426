// Package memtarget keeps the manager's memory near a target by steering the Go runtime's soft
// memory limit (debug.SetMemoryLimit) from the live heap.
//
// Nearly all of the manager's live heap is its informer caches, which live as long as the process
// and grow with the fleet. With Go's default pacing (GOGC=100) the heap grows to twice what the last
// collection left live before the next one: at a thousand instances most of the resident set is
// garbage waiting for a collection. A fixed lower GOGC would collect more often at every size, so
// small fleets would pay collector CPU for memory they do not need to save. Instead the soft limit
// is the target (a share of the container's memory request) while the live heap leaves room under
// it — the collector then runs at its default pace until the heap reaches the target, and more
// often only past it — and a quarter above the live heap once the caches need more than the target.
// That quarter is a floor, not a fixed pace: when the collector takes more than its budget of the
// process's CPU (half) while the live heap itself is past the target, as it does when a large
// fleet's caches outgrow the target by far and the allocations of a stamp-out keep filling so
// small a margin, the headroom grows, up to the default pacing's (the heap doubles), and shrinks
// back once the load passes — a large fleet never makes the collector run without pause (with a
// fixed quarter, the collector took most of the manager's CPU through a stamp-out of three
// thousand instances). A live heap under the target never grows it: a burst of reconciles would
// otherwise let a fleet that fits the target double its heap. The limit never exceeds the ceiling (a
// share of the container's memory limit), below which the kernel does not kill the pod.
package memtarget
