package ort

import "github.com/ortrain/ortrain/dtype"

// The element types are package dtype's (pure Go, for the packages that
// describe graphs and tensors); ort names them too for its callers.
type (
	DType        = dtype.DType
	Float16Bits  = dtype.Float16Bits
	BFloat16Bits = dtype.BFloat16Bits
	Elem         = dtype.Elem
)

// The element types ortrain moves between Go and ONNX Runtime.
const (
	Float32  = dtype.Float32
	Uint8    = dtype.Uint8
	Int8     = dtype.Int8
	Int32    = dtype.Int32
	Int64    = dtype.Int64
	Bool     = dtype.Bool
	Float16  = dtype.Float16
	Float64  = dtype.Float64
	BFloat16 = dtype.BFloat16
)

// ParseDType reads a type name as DType.String writes it.
func ParseDType(s string) (DType, error) { return dtype.ParseDType(s) }

// DTypeOf returns the tensor element type of T.
func DTypeOf[T Elem]() DType { return dtype.DTypeOf[T]() }

// ToBFloat16 rounds f to the nearest bfloat16, ties to even.
func ToBFloat16(f float32) BFloat16Bits { return dtype.ToBFloat16(f) }

// ToFloat16 rounds f to the nearest float16, ties to even.
func ToFloat16(f float32) Float16Bits { return dtype.ToFloat16(f) }
