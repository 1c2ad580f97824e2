package ort

/*
#include <stdlib.h>
#include "capi.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"
)

// bindTimeCopy makes CPU sessions bind inputs the way the CUDA provider
// does: a host value that is not the session's device memory is copied
// when it is bound, and later writes to it never reach a run. The CPU
// provider reads bound host memory at each run instead, so code that
// rewrites a bound host buffer in place trains on the CPU and silently
// trains on its first contents on a GPU; tests turn this on to see that
// on the CPU. $ORTRAIN_BIND_TIME_COPY=1 turns it on for a process.
var bindTimeCopy atomic.Bool

func init() { bindTimeCopy.Store(os.Getenv("ORTRAIN_BIND_TIME_COPY") == "1") }

// SetBindTimeCopy turns the CPU provider's emulation of the CUDA
// provider's bind-time copy of host inputs on or off and returns the
// previous setting. Only tests have a reason to call it.
func SetBindTimeCopy(on bool) (was bool) { return bindTimeCopy.Swap(on) }

// Binding ties values to a session's inputs and outputs for repeated runs
// without copies: ONNX Runtime reads bound inputs where they are and writes
// bound outputs into the given values, or allocates outputs on a device and
// hands them back. Names are converted to C strings once, so a run in a
// training loop allocates nothing in Go.
type Binding struct {
	s     *Session
	p     *C.OrtIoBinding
	names map[string]*C.char
	// copies are the private copies of host inputs bound under
	// bindTimeCopy, by input name.
	copies map[string]*Value
}

// NewBinding creates an empty binding for the session.
func (s *Session) NewBinding() (*Binding, error) {
	b := &Binding{s: s, names: map[string]*C.char{}}
	if err := check(C.ortrain_create_binding(s.p, &b.p)); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Binding) cname(name string) *C.char {
	c, ok := b.names[name]
	if !ok {
		c = C.CString(name)
		b.names[name] = c
	}
	return c
}

// BindInput feeds v, on the host or the session's device, to the named
// input. A host value on a GPU session is copied to the device now, when it
// is bound, not at each run: to feed new host data to a bound input, copy it
// into device memory (Staged) or bind it again.
func (b *Binding) BindInput(name string, v *Value) error {
	bound := v
	if bindTimeCopy.Load() && !b.s.opts.Device.CUDA && v.OnHost() && !v.resident {
		c, err := NewEmpty(v.dtype, v.shape)
		if err != nil {
			return fmt.Errorf("bind input %q: %w", name, err)
		}
		copy(c.hostBytes(), v.hostBytes())
		bound = c
	}
	if err := check(C.ortrain_bind_input(b.p, b.cname(name), bound.p)); err != nil {
		if bound != v {
			bound.Close()
		}
		return fmt.Errorf("bind input %q: %w", name, err)
	}
	if old := b.copies[name]; old != nil {
		old.Close()
		delete(b.copies, name)
	}
	if bound != v {
		if b.copies == nil {
			b.copies = map[string]*Value{}
		}
		b.copies[name] = bound
	}
	return nil
}

// BindOutput makes the named output be written into v, which must have the
// output's type and shape.
func (b *Binding) BindOutput(name string, v *Value) error {
	if err := check(C.ortrain_bind_output(b.p, b.cname(name), v.p)); err != nil {
		return fmt.Errorf("bind output %q: %w", name, err)
	}
	return nil
}

// BindOutputOnDevice lets ONNX Runtime allocate the named output in the
// session's device memory; Outputs hands it back. The allocated buffer stays
// bound: a later Run writes into it again unless the output is bound anew.
func (b *Binding) BindOutputOnDevice(name string) error { return b.bindOutputTo(name, false) }

// BindOutputOnHost lets ONNX Runtime allocate the named output in host memory.
func (b *Binding) BindOutputOnHost(name string) error { return b.bindOutputTo(name, true) }

func (b *Binding) bindOutputTo(name string, host bool) error {
	if err := b.s.memoryInfos(); err != nil {
		return err
	}
	m := b.s.devMem
	if host {
		m = b.s.hostMem
	}
	if err := check(C.ortrain_bind_output_to_device(b.p, b.cname(name), m)); err != nil {
		return fmt.Errorf("bind output %q: %w", name, err)
	}
	return nil
}

// ClearOutputs forgets the output bindings.
func (b *Binding) ClearOutputs() { C.ortrain_clear_outputs(b.p) }

// Run runs the session on the bound values and waits until the outputs are written.
func (b *Binding) Run() error {
	if err := check(C.ortrain_run_binding(b.s.p, b.p)); err != nil {
		return err
	}
	return check(C.ortrain_sync_outputs(b.p))
}

// Outputs returns the bound outputs in binding order, as new values the
// caller owns (they share memory with what ONNX Runtime wrote).
func (b *Binding) Outputs() ([]*Value, error) {
	var a *C.OrtAllocator
	if err := check(C.ortrain_default_allocator(&a)); err != nil {
		return nil, err
	}
	var arr **C.OrtValue
	var n C.size_t
	if err := check(C.ortrain_bound_outputs(b.p, a, &arr, &n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	defer C.ortrain_free_with(a, unsafe.Pointer(arr))
	out := make([]*Value, 0, int(n))
	var firstErr error
	for _, p := range unsafe.Slice(arr, int(n)) {
		if firstErr != nil {
			C.ortrain_release_value(p)
			continue
		}
		v, err := wrapValue(p)
		if err != nil {
			firstErr = err
			continue
		}
		out = append(out, v)
	}
	if firstErr != nil {
		for _, v := range out {
			v.Close()
		}
		return nil, firstErr
	}
	return out, nil
}

// Close releases the binding; bound values stay alive.
func (b *Binding) Close() {
	if b == nil || b.p == nil {
		return
	}
	C.ortrain_release_binding(b.p)
	for _, c := range b.names {
		C.free(unsafe.Pointer(c))
	}
	for _, v := range b.copies {
		v.Close()
	}
	b.p = nil
}
