package ort

/*
#include "capi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// AllocatorStats are what ONNX Runtime's allocator for a session's device
// counted (its arena's statistics): the memory a run actually took from it,
// as opposed to a process's resident size, which also holds the libraries,
// the Go heap and whatever the arena reserved but is not using.
type AllocatorStats struct {
	// InUse is the bytes handed out now; MaxInUse the most at any time since
	// the session was created: the peak of a training step's intermediate
	// values and outputs, rounded as the arena rounds requests.
	InUse, MaxInUse int64
	// TotalAllocated is the bytes the arena reserved from the system.
	TotalAllocated int64
	// MaxAllocSize is the largest single request; NumAllocs counts them.
	MaxAllocSize, NumAllocs int64
	// Limit is the arena's cap in bytes, -1 without one.
	Limit int64
}

// AllocatorStats reads the statistics of the allocator the session uses for
// its device memory. ok is false when that allocator keeps none (the CPU
// provider with its arena disabled: plain malloc).
func (s *Session) AllocatorStats() (st AllocatorStats, ok bool, err error) {
	if err := s.deviceAllocator(); err != nil {
		return st, false, err
	}
	var text *C.char
	if err := check(C.ortrain_allocator_stats(s.alloc, &text)); err != nil {
		return st, false, fmt.Errorf("allocator statistics on %v: %w", s.opts.Device, err)
	}
	defer C.ortrain_free(unsafe.Pointer(text))
	fields := map[string]*int64{"InUse": &st.InUse, "MaxInUse": &st.MaxInUse, "TotalAllocated": &st.TotalAllocated,
		"MaxAllocSize": &st.MaxAllocSize, "NumAllocs": &st.NumAllocs, "Limit": &st.Limit}
	for line := range strings.SplitSeq(C.GoString(text), "\n") {
		key, value, found := strings.Cut(line, "=")
		dst := fields[key]
		if !found || dst == nil {
			continue
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return st, false, fmt.Errorf("allocator statistics on %v: %s=%q is not an integer", s.opts.Device, key, value)
		}
		*dst = n
		ok = true
	}
	return st, ok, nil
}

// deviceAllocator creates s.alloc, the session's allocator for its device
// memory, once.
func (s *Session) deviceAllocator() error {
	if s.alloc != nil {
		return nil
	}
	if err := s.memoryInfos(); err != nil {
		return err
	}
	if err := check(C.ortrain_create_allocator(s.p, s.devMem, &s.alloc)); err != nil {
		return fmt.Errorf("allocator for %v: %w", s.opts.Device, err)
	}
	return nil
}

// cpuArena is the one CPU arena every session of the process shares (see
// registerCPUArena).
var cpuArena = struct {
	keys   []string
	values []C.size_t
}{
	// kSameAsRequested: the arena grows by what a request needs, not by
	// doubling; a free block more than 1 MiB larger than a request is
	// split, so a tensor does not hold a larger block's tail.
	keys:   []string{"arena_extend_strategy", "max_dead_bytes_per_chunk"},
	values: []C.size_t{1, 1 << 20},
}

// registerCPUArena gives the environment the CPU arena the sessions share:
// the training, optimizer and eval graphs then reuse each other's memory
// instead of each keeping its own peak, and the arena's rounding stays
// within a MiB per tensor (ONNX Runtime's default leaves up to 128 MiB
// unsplit, and per session). With replace, the arena registered before is
// dropped from the environment (its sessions keep it).
func registerCPUArena(replace bool) error {
	ck := cStrings(cpuArena.keys)
	defer freeCStrings(ck)
	r := C.int(0)
	if replace {
		r = 1
	}
	if err := check(C.ortrain_register_cpu_arena(env, &ck[0], &cpuArena.values[0], C.size_t(len(ck)), r)); err != nil {
		return fmt.Errorf("registering the shared CPU arena: %w", err)
	}
	return nil
}

// NewCPUArena gives the sessions created from now on a fresh shared CPU
// arena, with its own statistics: a training run's peak is then its own,
// not that of whatever ran in the process before. Sessions created
// earlier keep theirs.
func NewCPUArena() error {
	initMu.Lock()
	defer initMu.Unlock()
	if env == nil {
		return errors.New("ort: not initialised")
	}
	return registerCPUArena(true)
}
