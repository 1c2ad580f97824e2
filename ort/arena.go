package ort

/*
#include "capi.h"
*/
import "C"

import (
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
