package ort

/*
#include <stdlib.h>
#include <string.h>
#include "capi.h"
*/
import "C"

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort/onnxpb"
)

// TransferStats counts the copies between Go-visible host memory and a
// session's device memory that went through this package: what a training
// step must keep to its batch and a few scalars.
type TransferStats struct {
	HostToDevice, DeviceToHost int64 // copies
	Bytes                      int64 // bytes moved by them
}

var transfers struct{ h2d, d2h, bytes atomic.Int64 }

// Transfers returns the counts since the process started.
func Transfers() TransferStats {
	return TransferStats{transfers.h2d.Load(), transfers.d2h.Load(), transfers.bytes.Load()}
}

// Sub returns the copies made between an earlier reading o and t.
func (t TransferStats) Sub(o TransferStats) TransferStats {
	return TransferStats{t.HostToDevice - o.HostToDevice, t.DeviceToHost - o.DeviceToHost, t.Bytes - o.Bytes}
}

// Alloc allocates a tensor in the session's device memory. On the CPU it is
// zero-filled; on a GPU its contents are undefined until written.
func (s *Session) Alloc(dtype DType, shape []int64) (*Value, error) {
	if !s.opts.Device.CUDA {
		v, err := NewEmpty(dtype, shape)
		if v != nil {
			v.resident = true
		}
		return v, err
	}
	if err := s.deviceAllocator(); err != nil {
		return nil, err
	}
	v, err := newValue(s.alloc, dtype, shape)
	if v != nil {
		v.resident = true
	}
	return v, err
}

func (s *Session) memoryInfos() error {
	if s.devMem != nil {
		return nil
	}
	var err error
	if s.hostMem, err = memoryInfo(CPU); err == nil {
		s.devMem, err = memoryInfo(s.opts.Device)
	}
	return err
}

func memoryInfo(d Device) (*C.OrtMemoryInfo, error) {
	name := C.CString(d.MemoryInfoName())
	defer C.free(unsafe.Pointer(name))
	var m *C.OrtMemoryInfo
	err := check(C.ortrain_memory_info(name, C.int(d.ID), 0, &m))
	return m, err
}

// Upload copies a host value into new device memory of the session.
func (s *Session) Upload(host *Value) (*Value, error) {
	dev, err := s.Alloc(host.dtype, host.shape)
	if err != nil {
		return nil, err
	}
	if err := s.Copy(dev, host); err != nil {
		dev.Close()
		return nil, err
	}
	return dev, nil
}

// Download copies a value of the session's device into new host memory.
func (s *Session) Download(dev *Value) (*Value, error) {
	host, err := NewEmpty(dev.dtype, dev.shape)
	if err != nil {
		return nil, err
	}
	if err := s.Copy(host, dev); err != nil {
		host.Close()
		return nil, err
	}
	return host, nil
}

// Copy copies src into dst, which must have the same type and shape; either
// may be on the host or on the session's device.
func (s *Session) Copy(dst, src *Value) error {
	if dst.dtype != src.dtype || !slices.Equal(dst.shape, src.shape) {
		return fmt.Errorf("copy of %v%v into %v%v: type or shape differ", src.dtype, src.shape, dst.dtype, dst.shape)
	}
	switch {
	case src.OnHost() && dst.OnHost():
		copy(dst.hostBytes(), src.hostBytes())
	default:
		if err := s.deviceCopy(dst, src); err != nil {
			return err
		}
	}
	count(dst, src)
	return nil
}

func count(dst, src *Value) {
	if dst.resident || !dst.OnHost() {
		transfers.h2d.Add(1)
	} else {
		transfers.d2h.Add(1)
	}
	transfers.bytes.Add(src.Bytes())
}

// copier moves tensors between host and GPU memory by running an Identity
// graph with IO binding: ONNX Runtime copies the bound input to the device
// and the output to where it is bound, through the provider's own data
// transfer, so ortrain needs no CUDA runtime of its own.
type copier struct {
	mu       sync.Mutex
	sessions map[DType]*Session
	bindings map[DType]*Binding
}

func (s *Session) deviceCopy(dst, src *Value) error {
	if !s.opts.Device.CUDA {
		return fmt.Errorf("a %v session cannot copy a value on %v", s.opts.Device, map[bool]Device{true: dst.loc, false: src.loc}[src.OnHost()])
	}
	if s.copier == nil {
		s.copier = &copier{sessions: map[DType]*Session{}, bindings: map[DType]*Binding{}}
	}
	c := s.copier
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.bindings[src.dtype]
	if b == nil {
		opts := s.opts
		opts.CUDA.EnableCUDAGraph = false
		cs, err := NewSessionFromBytes(identityModel(src.dtype), opts)
		if err != nil {
			return fmt.Errorf("device copy session: %w", err)
		}
		if b, err = cs.NewBinding(); err != nil {
			cs.Close()
			return err
		}
		c.sessions[src.dtype], c.bindings[src.dtype] = cs, b
	}
	if err := b.BindInput("x", src); err != nil {
		return err
	}
	if err := b.BindOutput("y", dst); err != nil {
		return err
	}
	return b.Run()
}

func (c *copier) close() {
	for d, b := range c.bindings {
		b.Close()
		c.sessions[d].Close()
	}
}

// identityModel is y = Identity(x) for tensors of any rank.
func identityModel(dtype DType) []byte {
	tensor := func(name string) *onnxpb.ValueInfoProto {
		return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{
			Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(dtype))}}}}
	}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{
			Name:   proto.String("ortrain_copy"),
			Node:   []*onnxpb.NodeProto{{OpType: proto.String("Identity"), Input: []string{"x"}, Output: []string{"y"}}},
			Input:  []*onnxpb.ValueInfoProto{tensor("x")},
			Output: []*onnxpb.ValueInfoProto{tensor("y")},
		},
	}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err) // a fixed, valid message
	}
	return b
}

// Staged is a session input that Go writes in host memory and graphs read
// in the session's device memory: Host is where Go writes, Device is what
// is bound, and Push copies the one into the other. Binding a host value
// instead would work on the CPU provider, which reads bound host memory at
// each run, but the CUDA provider copies a bound host value once, when it is
// bound, so in-place writes after that would never reach the GPU.
type Staged struct {
	Host, Device *Value
	s            *Session
	// host and dev view the values' memory where Go can (dev only on the
	// CPU provider), so that a push there makes no call into ONNX Runtime.
	host, dev []byte
	// sent is what the last Push copied, for values small enough that
	// comparing costs less than a copy (step scalars); nil otherwise.
	sent   []byte
	pushed bool
}

// stagedCompareMax is the size up to which Push skips unchanged values.
const stagedCompareMax = 64

// NewStaged allocates a zero-filled host value and a device value of the
// given type and shape for the session. On CUDA the host value is pinned
// (page-locked) where the provider gives such memory, so that Push copies
// at the bus's speed rather than through the driver's bounce buffer;
// PinnedErr says why it is not.
func (s *Session) NewStaged(dtype DType, shape []int64) (*Staged, error) {
	var host *Value
	var err error
	if s.opts.Device.CUDA {
		if host, err = s.newPinned(dtype, shape); err != nil {
			s.pinnedErr, host = err, nil
		}
	}
	if host == nil {
		if host, err = NewEmpty(dtype, shape); err != nil {
			return nil, err
		}
	}
	dev, err := s.Alloc(dtype, shape)
	if err != nil {
		host.Close()
		return nil, err
	}
	st := &Staged{Host: host, Device: dev, s: s, host: host.hostBytes()}
	if dev.OnHost() {
		st.dev = dev.hostBytes()
	}
	if host.Bytes() <= stagedCompareMax {
		st.sent = make([]byte, host.Bytes())
	}
	return st, nil
}

// newPinned allocates a zero-filled tensor in the CUDA provider's pinned
// host memory.
func (s *Session) newPinned(dtype DType, shape []int64) (*Value, error) {
	if s.pinned == nil {
		if s.pinnedErr != nil {
			return nil, s.pinnedErr
		}
		name := C.CString("CudaPinned")
		defer C.free(unsafe.Pointer(name))
		// OrtMemTypeCPUOutput (-1): host memory the device writes and reads.
		if err := check(C.ortrain_memory_info(name, C.int(s.opts.Device.ID), -1, &s.pinnedMem)); err != nil {
			return nil, fmt.Errorf("pinned host memory: %w", err)
		}
		if err := check(C.ortrain_create_allocator(s.p, s.pinnedMem, &s.pinned)); err != nil {
			return nil, fmt.Errorf("pinned host memory: %w", err)
		}
		if err := s.probePinned(); err != nil {
			C.ortrain_release_allocator(s.pinned)
			s.pinned = nil
			return nil, fmt.Errorf("pinned host memory: %w", err)
		}
	}
	v, err := newValue(s.pinned, dtype, shape)
	if err != nil {
		return nil, fmt.Errorf("pinned host memory: %w", err)
	}
	if !v.OnHost() {
		v.Close()
		return nil, fmt.Errorf("pinned host memory: ONNX Runtime gave a tensor on %v", v.loc)
	}
	if b := v.hostBytes(); len(b) > 0 {
		C.memset(unsafe.Pointer(&b[0]), 0, C.size_t(len(b)))
	}
	return v, nil
}

// probePinned copies a pinned value to the device and back once, before
// any batch relies on the route.
func (s *Session) probePinned() error {
	v, err := newValue(s.pinned, Float32, []int64{4})
	if err != nil {
		return err
	}
	defer v.Close()
	want := []float32{1, -2, 3.5, 1e-3}
	copy(Data[float32](v), want)
	dev, err := s.Upload(v)
	if err != nil {
		return fmt.Errorf("copy to the device: %w", err)
	}
	defer dev.Close()
	back, err := s.Download(dev)
	if err != nil {
		return fmt.Errorf("copy back: %w", err)
	}
	defer back.Close()
	if got := Data[float32](back); !slices.Equal(got, want) {
		return fmt.Errorf("a copy to the device and back gave %v, not %v", got, want)
	}
	return nil
}

// PinnedErr says why the session's staged host values are not pinned:
// nil where they are, or on the CPU, where there is no copy.
func (s *Session) PinnedErr() error { return s.pinnedErr }

// Push copies the host value to the device; a small value that has not
// changed since the last Push is not copied again.
func (st *Staged) Push() error {
	if st.sent != nil && st.pushed && bytes.Equal(st.host, st.sent) {
		return nil
	}
	if st.dev != nil {
		copy(st.dev, st.host)
		count(st.Device, st.Host)
	} else if err := st.s.Copy(st.Device, st.Host); err != nil {
		return err
	}
	if st.sent != nil {
		copy(st.sent, st.host)
	}
	st.pushed = true
	return nil
}

// Close releases both values. Closing twice is harmless.
func (st *Staged) Close() {
	if st != nil {
		st.Host.Close()
		st.Device.Close()
	}
}
