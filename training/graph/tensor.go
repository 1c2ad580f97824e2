package graph

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/onnxpb"
)

// Raw builds a tensor from little-endian raw bytes.
func Raw(name string, dt dtype.DType, dims []int64, raw []byte) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(dt)), Dims: dims, RawData: raw}
}

// Float32s builds a float32 tensor; nil dims is a scalar.
func Float32s(name string, dims []int64, v []float32) *onnxpb.TensorProto {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return Raw(name, dtype.Float32, dims, raw)
}

// Float64s builds a float64 tensor; nil dims is a scalar.
func Float64s(name string, dims []int64, v []float64) *onnxpb.TensorProto {
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(x))
	}
	return Raw(name, dtype.Float64, dims, raw)
}

// Int64s builds an int64 tensor; nil dims is a scalar.
func Int64s(name string, dims []int64, v []int64) *onnxpb.TensorProto {
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	return Raw(name, dtype.Int64, dims, raw)
}

// Floats builds a tensor of the given floating type from float64 values,
// rounding to float16 or bfloat16 where asked.
func Floats(name string, dt dtype.DType, dims []int64, v []float64) (*onnxpb.TensorProto, error) {
	switch dt {
	case dtype.Float32:
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return Float32s(name, dims, f), nil
	case dtype.Float64:
		return Float64s(name, dims, v), nil
	case dtype.Float16, dtype.BFloat16:
		raw := make([]byte, 2*len(v))
		for i, x := range v {
			var h uint16
			if dt == dtype.Float16 {
				h = uint16(dtype.ToFloat16(float32(x)))
			} else {
				h = uint16(dtype.ToBFloat16(float32(x)))
			}
			binary.LittleEndian.PutUint16(raw[2*i:], h)
		}
		return Raw(name, dt, dims, raw), nil
	}
	return nil, fmt.Errorf("graph: no floating constant of type %v", dt)
}

// Numel returns the element count of a tensor.
func Numel(t *onnxpb.TensorProto) int64 {
	return dtype.Numel(t.GetDims())
}

// RawBytes returns a tensor's data as little-endian bytes, whichever field
// holds it; external data must have been loaded first.
func RawBytes(t *onnxpb.TensorProto) ([]byte, error) {
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return nil, fmt.Errorf("graph: tensor %q still refers to external data", t.GetName())
	}
	// Tensors FromModel did not check (a Constant node's value) must not
	// make us allocate what their dimensions claim but their data lacks.
	n, err := checkTensor(t)
	if err != nil {
		return nil, err
	}
	if t.RawData != nil {
		return t.RawData, nil
	}
	dt := dtype.DType(t.GetDataType())
	size := dt.Size()
	if size == 0 {
		return nil, fmt.Errorf("graph: tensor %q has unsupported type %d", t.GetName(), t.GetDataType())
	}
	raw := make([]byte, n)
	switch dt {
	case dtype.Float32:
		for i, x := range t.GetFloatData() {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
		}
	case dtype.Float64:
		for i, x := range t.GetDoubleData() {
			binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(x))
		}
	case dtype.Int64:
		for i, x := range t.GetInt64Data() {
			binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
		}
	case dtype.Int32, dtype.Int8, dtype.Uint8, dtype.Bool, dtype.Float16, dtype.BFloat16:
		// ONNX stores these widened to int32 in int32_data.
		for i, x := range t.GetInt32Data() {
			switch size {
			case 4:
				binary.LittleEndian.PutUint32(raw[4*i:], uint32(x))
			case 2:
				binary.LittleEndian.PutUint16(raw[2*i:], uint16(x))
			case 1:
				raw[i] = byte(x)
			}
		}
	default:
		return nil, fmt.Errorf("graph: tensor %q has unsupported type %v", t.GetName(), dt)
	}
	return raw, nil
}

// IntData decodes an int64 or int32 tensor.
func IntData(t *onnxpb.TensorProto) ([]int64, error) {
	raw, err := RawBytes(t)
	if err != nil {
		return nil, err
	}
	switch dtype.DType(t.GetDataType()) {
	case dtype.Int64:
		v := make([]int64, len(raw)/8)
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
		}
		return v, nil
	case dtype.Int32:
		v := make([]int64, len(raw)/4)
		for i := range v {
			v[i] = int64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
		}
		return v, nil
	}
	return nil, fmt.Errorf("graph: tensor %q is not an integer tensor", t.GetName())
}

// FloatData decodes a floating tensor to float64.
func FloatData(t *onnxpb.TensorProto) ([]float64, error) {
	raw, err := RawBytes(t)
	if err != nil {
		return nil, err
	}
	switch dtype.DType(t.GetDataType()) {
	case dtype.Float32:
		v := make([]float64, len(raw)/4)
		for i := range v {
			v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		}
		return v, nil
	case dtype.Float64:
		v := make([]float64, len(raw)/8)
		for i := range v {
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
		}
		return v, nil
	case dtype.Float16, dtype.BFloat16:
		v := make([]float64, len(raw)/2)
		for i := range v {
			h := binary.LittleEndian.Uint16(raw[2*i:])
			if dtype.DType(t.GetDataType()) == dtype.Float16 {
				v[i] = float64(dtype.Float16Bits(h).Float32())
			} else {
				v[i] = float64(dtype.BFloat16Bits(h).Float32())
			}
		}
		return v, nil
	}
	return nil, fmt.Errorf("graph: tensor %q is not a floating tensor", t.GetName())
}

// TensorError is an initializer whose facts do not hold together.
type TensorError struct {
	Name, Msg string
}

func (e *TensorError) Error() string { return fmt.Sprintf("graph: initializer %q: %s", e.Name, e.Msg) }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *TensorError) BadInput() bool { return true }

// checkTensor checks what an initializer claims before anything is
// allocated for it: dimensions ≥ 0 whose product fits, and inline data of
// exactly the size the shape needs (for the element types ortrain reads).
// External data is checked where it is read.
func checkTensor(t *onnxpb.TensorProto) (bytes int64, err error) {
	bad := func(format string, args ...any) error { return &TensorError{t.GetName(), fmt.Sprintf(format, args...)} }
	size := int64(dtype.DType(t.GetDataType()).Size()) // 0 for types ortrain does not read
	n := int64(1)
	for _, d := range t.GetDims() {
		if d < 0 {
			return 0, bad("negative dimension %d in %v", d, t.GetDims())
		}
		if d > 0 && n > math.MaxInt64/d/max(size, 1) {
			return 0, bad("dimensions %v overflow", t.GetDims())
		}
		n *= d
	}
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || size == 0 {
		return n * size, nil
	}
	if t.RawData != nil {
		if int64(len(t.RawData)) != n*size {
			return 0, bad("%d bytes of raw data, its type and dimensions %v need %d", len(t.RawData), t.GetDims(), n*size)
		}
		return n * size, nil
	}
	// Count the field RawBytes reads for the type: another, non-empty
	// field must not vouch for it (RawBytes would index past its end).
	var have int64
	switch dtype.DType(t.GetDataType()) {
	case dtype.Float32:
		have = int64(len(t.GetFloatData()))
	case dtype.Float64:
		have = int64(len(t.GetDoubleData()))
	case dtype.Int64:
		have = int64(len(t.GetInt64Data()))
	default: // Int32, Int8, Uint8, Bool, Float16, BFloat16, as int32_data
		have = int64(len(t.GetInt32Data()))
	}
	if have != n {
		return 0, bad("%d values, its dimensions %v hold %d", have, t.GetDims(), n)
	}
	return n * size, nil
}
