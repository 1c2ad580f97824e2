// Package data is the loader core shared by every ortrain data pipeline: a
// Dataset yields samples into preallocated batch buffers, and a Loader runs
// N worker goroutines that fill whole batches ahead of the trainer, bounded
// in host memory, shuffled deterministically per epoch, sharded by rank, and
// resumable from a Cursor.
package data

import "fmt"

// DType is the element type of a tensor in a Batch.
type DType int

// The element types a Batch carries: what ONNX Runtime inputs of the models
// we train need (float inputs, int64 ids and labels, uint8 masks).
const (
	Float32 DType = iota + 1
	Int64
	Uint8
)

// Size is the size in bytes of one element of d.
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Int64:
		return 8
	case Uint8:
		return 1
	}
	return 0
}

// String names d as ONNX does.
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int64:
		return "int64"
	case Uint8:
		return "uint8"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// TensorSpec describes one named tensor of a single sample; a batch of such
// tensors has shape [batch, Shape...].
type TensorSpec struct {
	Name  string
	DType DType
	Shape []int
}

// Elems is the number of elements of one sample's tensor.
func (s TensorSpec) Elems() int {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// Bytes is the size in bytes of one sample's tensor.
func (s TensorSpec) Bytes() int64 { return int64(s.Elems()) * int64(s.DType.Size()) }

// Tensor is a named, typed, shaped host buffer. Exactly one of F32, I64 and
// U8 is set, per DType. In a Batch the first dimension is the batch size; in
// a Sample handed to Dataset.Load the tensor is one row of the batch (Shape
// without the batch dimension) and its data aliases the batch buffer.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	F32   []float32
	I64   []int64
	U8    []uint8
}

// Len is the number of elements the tensor's data slice holds.
func (t *Tensor) Len() int {
	switch t.DType {
	case Float32:
		return len(t.F32)
	case Int64:
		return len(t.I64)
	case Uint8:
		return len(t.U8)
	}
	return 0
}

// Bytes is the size in bytes of the tensor's data.
func (t *Tensor) Bytes() int64 { return int64(t.Len()) * int64(t.DType.Size()) }

// newTensor allocates a batch tensor for rows samples of spec.
func newTensor(spec TensorSpec, rows int) *Tensor {
	n := spec.Elems() * rows
	t := &Tensor{Name: spec.Name, DType: spec.DType, Shape: append([]int{rows}, spec.Shape...)}
	switch spec.DType {
	case Float32:
		t.F32 = make([]float32, n)
	case Int64:
		t.I64 = make([]int64, n)
	case Uint8:
		t.U8 = make([]uint8, n)
	}
	return t
}

// row points dst at row r of batch tensor t, whose rows have elems elements.
func (t *Tensor) row(r, elems int, dst *Tensor) {
	dst.Name, dst.DType, dst.Shape = t.Name, t.DType, t.Shape[1:]
	lo, hi := r*elems, (r+1)*elems
	dst.F32, dst.I64, dst.U8 = nil, nil, nil
	switch t.DType {
	case Float32:
		dst.F32 = t.F32[lo:hi:hi]
	case Int64:
		dst.I64 = t.I64[lo:hi:hi]
	case Uint8:
		dst.U8 = t.U8[lo:hi:hi]
	}
}

// truncate shrinks the batch dimension of t to rows (a short last batch, or
// rows dropped for bad files) without reallocating.
func (t *Tensor) truncate(rows, elems int) {
	t.Shape[0] = rows
	n := rows * elems
	switch t.DType {
	case Float32:
		t.F32 = t.F32[:n]
	case Int64:
		t.I64 = t.I64[:n]
	case Uint8:
		t.U8 = t.U8[:n]
	}
}

// Sample is one row of every tensor of a batch, in the order of the
// dataset's Spec; Dataset.Load writes into it.
type Sample []Tensor

// Get returns the sample's tensor called name, or nil.
func (s Sample) Get(name string) *Tensor {
	for i := range s {
		if s[i].Name == name {
			return &s[i]
		}
	}
	return nil
}
