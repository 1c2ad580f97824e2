// Package dtype names tensor element types (ONNX's TensorProto codes,
// which ONNX Runtime uses too) and converts half-precision numbers. It is
// pure Go: packages that describe graphs and tensors use it without
// ONNX Runtime's headers.
package dtype

import "fmt"

// DType is a tensor element type; the values are ONNX's TensorProto.DataType
// codes, which ONNX Runtime uses too.
type DType int32

// The element types ortrain moves between Go and ONNX Runtime.
const (
	Float32  DType = 1
	Uint8    DType = 2
	Int8     DType = 3
	Int32    DType = 6
	Int64    DType = 7
	Bool     DType = 9
	Float16  DType = 10
	Float64  DType = 11
	BFloat16 DType = 16
)

var dtypeNames = map[DType]string{
	Float32: "float32", Uint8: "uint8", Int8: "int8", Int32: "int32", Int64: "int64",
	Bool: "bool", Float16: "float16", Float64: "float64", BFloat16: "bfloat16",
}

// String returns the name PyTorch and NumPy use for the type.
func (d DType) String() string {
	if n, ok := dtypeNames[d]; ok {
		return n
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// Size returns the bytes one element takes, or 0 for a type ortrain does not handle.
func (d DType) Size() int {
	switch d {
	case Uint8, Int8, Bool:
		return 1
	case Float16, BFloat16:
		return 2
	case Float32, Int32:
		return 4
	case Int64, Float64:
		return 8
	}
	return 0
}

// Supported reports whether ortrain can hold tensors of this type.
func (d DType) Supported() bool { return d.Size() > 0 }

// ParseDType reads a type name as String writes it.
func ParseDType(s string) (DType, error) {
	for d, n := range dtypeNames {
		if n == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown element type %q (want one of float32, float16, bfloat16, float64, int64, int32, int8, uint8, bool)", s)
}

// MarshalText writes the type's name, so that JSON holds "float32" rather
// than ONNX's number for it.
func (d DType) MarshalText() ([]byte, error) {
	if _, ok := dtypeNames[d]; !ok {
		return nil, fmt.Errorf("element type %d has no name", int32(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText reads a name MarshalText wrote.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err == nil {
		*d = v
	}
	return err
}

// Float16Bits is an IEEE 754 half-precision number as stored in a tensor.
type Float16Bits uint16

// BFloat16Bits is a bfloat16 number (the top half of a float32) as stored in a tensor.
type BFloat16Bits uint16

// Elem is the set of Go types that map one-to-one onto tensor element types.
type Elem interface {
	~float32 | ~float64 | ~int64 | ~int32 | ~int8 | ~uint8 | ~bool | Float16Bits | BFloat16Bits
}

// DTypeOf returns the tensor element type of T.
func DTypeOf[T Elem]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int64:
		return Int64
	case int32:
		return Int32
	case int8:
		return Int8
	case uint8:
		return Uint8
	case bool:
		return Bool
	case Float16Bits:
		return Float16
	case BFloat16Bits:
		return BFloat16
	}
	panic(fmt.Sprintf("ort: no element type for %T", z))
}

// Numel returns the number of elements of a shape; 1 for a scalar.
func Numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}
