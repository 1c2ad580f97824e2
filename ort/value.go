package ort

/*
#include <string.h>
#include "capi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ortrain/ortrain/dtype"
)

// maxRank bounds the dimensions ortrain reads back from a tensor.
const maxRank = 16

// Value is a tensor held by ONNX Runtime, on the host or on a device. The
// memory belongs to ONNX Runtime's allocators, never to Go, so a value can be
// bound to any number of runs without Go copying it.
type Value struct {
	p     *C.OrtValue
	dtype DType
	shape []int64
	loc   Device
	// resident marks memory allocated as the session's device memory by
	// Session.Alloc; on the CPU provider that is host memory too, and this is
	// what tells the transfer counter which way a copy went.
	resident bool
	// base is the value whose memory a view (View) lies in, kept reachable
	// so that the view's memory is not released while the view is in use.
	base *Value
}

// NewTensor allocates a host tensor of the given shape and copies data into it.
func NewTensor[T Elem](shape []int64, data []T) (*Value, error) {
	v, err := NewEmpty(DTypeOf[T](), shape)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != v.Len() {
		v.Close()
		return nil, fmt.Errorf("tensor of shape %v holds %d elements, got %d", shape, Numel(shape), len(data))
	}
	copy(Data[T](v), data)
	return v, nil
}

// NewTensorFromBytes allocates a host tensor and copies raw little-endian
// element data into it, as safetensors and ONNX's raw_data store it.
func NewTensorFromBytes(dtype DType, shape []int64, raw []byte) (*Value, error) {
	v, err := NewEmpty(dtype, shape)
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) != v.Bytes() {
		v.Close()
		return nil, fmt.Errorf("%v tensor of shape %v takes %d bytes, got %d", dtype, shape, v.Bytes(), len(raw))
	}
	copy(v.hostBytes(), raw)
	return v, nil
}

// RawBytes returns a host tensor's data as bytes over ONNX Runtime's memory:
// no copy, valid until the value is closed. It panics for device values.
func (v *Value) RawBytes() []byte { return v.hostBytes() }

// NewScalar allocates a host tensor of rank 0 holding x.
func NewScalar[T Elem](x T) (*Value, error) { return NewTensor([]int64{}, []T{x}) }

// NewEmpty allocates a zero-filled host tensor.
func NewEmpty(dtype DType, shape []int64) (*Value, error) {
	if !Initialised() {
		return nil, errors.New("ort: Init has not been called")
	}
	var a *C.OrtAllocator
	if err := check(C.ortrain_default_allocator(&a)); err != nil {
		return nil, err
	}
	v, err := newValue(a, dtype, shape)
	if err != nil {
		return nil, err
	}
	b := v.hostBytes()
	if len(b) > 0 {
		C.memset(unsafe.Pointer(&b[0]), 0, C.size_t(len(b)))
	}
	return v, nil
}

func newValue(a *C.OrtAllocator, dtype DType, shape []int64) (*Value, error) {
	if !dtype.Supported() {
		return nil, fmt.Errorf("unsupported element type %v", dtype)
	}
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("negative dimension in shape %v", shape)
		}
	}
	var shp *C.int64_t
	if len(shape) > 0 {
		shp = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	var p *C.OrtValue
	if err := check(C.ortrain_create_tensor(a, shp, C.size_t(len(shape)), C.int(dtype), &p)); err != nil {
		return nil, err
	}
	return wrapValue(p)
}

// wrapValue takes ownership of an OrtValue and reads its type, shape and location.
func wrapValue(p *C.OrtValue) (*Value, error) {
	var elem C.int
	var dims [maxRank]C.int64_t
	var rank C.size_t
	err := check(C.ortrain_tensor_shape(p, &elem, &dims[0], maxRank, &rank))
	if err == nil && rank > maxRank {
		err = fmt.Errorf("tensor of rank %d exceeds ortrain's limit of %d", rank, maxRank)
	}
	var name *C.char
	var id, memType C.int
	if err == nil {
		err = check(C.ortrain_value_location(p, &name, &id, &memType))
	}
	if err != nil {
		C.ortrain_release_value(p)
		return nil, err
	}
	v := &Value{p: p, dtype: DType(elem), shape: make([]int64, int(rank))}
	for i := range v.shape {
		v.shape[i] = int64(dims[i])
	}
	// Pinned host memory (CudaPinned) and CPU-typed memory are host-readable.
	if n := C.GoString(name); n == "Cuda" && memType == 0 {
		v.loc = CUDADevice(int(id))
	}
	return v, nil
}

// View returns a tensor of the given type and shape over v's memory from
// element offset on, in v's element type: what lets one device allocation
// hold many tensors (a flat buffer whose parts a graph reads one by one and
// another graph reads whole). Writing either writes both. The view does not
// own the memory: v must stay open while the view is used.
func (v *Value) View(offset int64, shape []int64) (*Value, error) {
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("negative dimension in shape %v", shape)
		}
	}
	n := Numel(shape)
	if offset < 0 || offset+n > v.Len() {
		return nil, fmt.Errorf("view of %d elements at %d lies outside a tensor of %d", n, offset, v.Len())
	}
	size := int64(v.dtype.Size())
	var shp *C.int64_t
	if len(shape) > 0 {
		shp = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	var p *C.OrtValue
	if err := check(C.ortrain_view_tensor(v.p, C.size_t(offset*size), C.size_t(n*size), shp, C.size_t(len(shape)), C.int(v.dtype), &p)); err != nil {
		return nil, err
	}
	w, err := wrapValue(p)
	if w != nil {
		w.resident, w.base = v.resident, v
	}
	return w, err
}

// DType returns the element type.
func (v *Value) DType() DType { return v.dtype }

// Shape returns the dimensions; the caller must not modify them.
func (v *Value) Shape() []int64 { return v.shape }

// Len returns the number of elements.
func (v *Value) Len() int64 { return Numel(v.shape) }

// Bytes returns the size of the tensor's data in bytes.
func (v *Value) Bytes() int64 { return v.Len() * int64(v.dtype.Size()) }

// Location returns the device whose memory holds the data.
func (v *Value) Location() Device { return v.loc }

// OnHost reports whether Go can read the data in place.
func (v *Value) OnHost() bool { return !v.loc.CUDA }

// DataPointer returns the address of the tensor's data, on its device:
// what a collective library (NCCL) sums in place, and what tests compare
// to show two values share memory.
func (v *Value) DataPointer() uintptr {
	var d unsafe.Pointer
	if check(C.ortrain_tensor_data(v.p, &d)) != nil {
		return 0
	}
	return uintptr(d)
}

// Data returns the elements of a host tensor as a slice over ONNX Runtime's
// memory: no copy, valid until the value is closed. It panics if T is not the
// tensor's element type or the tensor is on a device, both programming errors.
func Data[T Elem](v *Value) []T {
	if DTypeOf[T]() != v.dtype {
		panic(fmt.Sprintf("ort.Data: tensor holds %v, not %v", v.dtype, DTypeOf[T]()))
	}
	b := v.hostBytes()
	if len(b) == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), v.Len())
}

// hostBytes views a host tensor's data; it panics for device values.
func (v *Value) hostBytes() []byte {
	if !v.OnHost() {
		panic(fmt.Sprintf("ort: tensor lives on %v; copy it to the host first", v.loc))
	}
	n := v.Bytes()
	if n == 0 {
		return nil
	}
	var d unsafe.Pointer
	if err := check(C.ortrain_tensor_data(v.p, &d)); err != nil {
		panic(err)
	}
	return unsafe.Slice((*byte)(d), n)
}

// Close releases the value. Closing twice is harmless.
func (v *Value) Close() {
	if v != nil && v.p != nil {
		C.ortrain_release_value(v.p)
		v.p = nil
	}
}

// Numel returns the number of elements of a shape; 1 for a scalar.
func Numel(shape []int64) int64 { return dtype.Numel(shape) }
