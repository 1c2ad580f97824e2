// Package ortimport imports the training artifacts ONNX Runtime's
// generate_artifacts writes (training_model.onnx, eval_model.onnx,
// optimizer_model.onnx, checkpoint) as an ortrain artifact directory
// (training/artifacts/SPEC.md) that stock ONNX Runtime runs: every
// com.microsoft training-only op is lowered to standard ops, the *Grad ops
// through autodiff's own rules, and the flatbuffer checkpoint becomes
// weights.safetensors.
package ortimport

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/ortrain/ortrain/ort"
)

// Checkpoint is ONNX Runtime's training checkpoint: the parameters, the
// optimizer state and the user properties. The file is a flatbuffer with
// identifier "ODTC" (schema ort_training_checkpoint.fbs; tensors as in
// ort.fbs), read here field by field.
type Checkpoint struct {
	Version int32
	Params  []Tensor // trained (requires_grad_params)
	Frozen  []Tensor
	// Nominal checkpoints name the parameters without holding their data.
	Nominal bool
	Groups  []OptimizerGroup
	Ints    map[string]int64
	Floats  map[string]float32
	Strings map[string]string
}

// Tensor is a named tensor of the checkpoint, raw little-endian data.
type Tensor struct {
	Name  string
	DType ort.DType
	Shape []int64
	Data  []byte
}

// OptimizerGroup is one optimizer's state: the step count, the initial
// learning rate and per parameter its momentums (AdamW: first and second).
type OptimizerGroup struct {
	Name      string
	Step      int64
	InitialLR float32
	States    []ParamState
}

// ParamState is one parameter's optimizer state.
type ParamState struct {
	Param     string
	Momentums []Tensor
}

// FormatError is a file that is not a checkpoint ortrain can read.
type FormatError struct{ Path, Msg string }

func (e *FormatError) Error() string { return fmt.Sprintf("ortimport: %s: %s", e.Path, e.Msg) }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *FormatError) BadInput() bool { return true }

// ReadCheckpoint reads a checkpoint file written by ONNX Runtime 1.14 or
// later. Checkpoints with external data are refused.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	buf, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseCheckpoint(path, buf)
}

func parseCheckpoint(path string, buf []byte) (c *Checkpoint, err error) {
	if len(buf) < 8 || string(buf[4:8]) != "ODTC" {
		return nil, &FormatError{path, "not an ONNX Runtime training checkpoint (no ODTC identifier)"}
	}
	defer func() {
		// Offsets pointing outside the buffer panic in the accessors.
		if r := recover(); r != nil {
			c, err = nil, &FormatError{path, fmt.Sprintf("corrupt flatbuffer: %v", r)}
		}
	}()
	fb := flat(buf)
	root := fb.table(int(fb.u32(0)))
	c = &Checkpoint{Version: int32(root.i64(0, 4)), Ints: map[string]int64{}, Floats: map[string]float32{}, Strings: map[string]string{}}
	if ms, ok := root.child(1); ok {
		c.Nominal = ms.i64(2, 1) != 0
		if ms.i64(3, 1) != 0 {
			return nil, &FormatError{path, "the checkpoint keeps its tensors in an external data file, which ortrain does not read"}
		}
		c.Params = tensors(ms, 0)
		c.Frozen = tensors(ms, 1)
	}
	for _, g := range root.tables(2) {
		og := OptimizerGroup{Name: g.str(0), Step: g.i64(1, 8), InitialLR: math.Float32frombits(uint32(g.i64(2, 4)))}
		for _, s := range g.tables(3) {
			og.States = append(og.States, ParamState{Param: s.str(0), Momentums: tensors(s, 1)})
		}
		c.Groups = append(c.Groups, og)
	}
	if pb, ok := root.child(3); ok {
		for _, p := range pb.tables(0) {
			c.Ints[p.str(0)] = p.i64(1, 8)
		}
		for _, p := range pb.tables(1) {
			c.Floats[p.str(0)] = math.Float32frombits(uint32(p.i64(1, 4)))
		}
		for _, p := range pb.tables(2) {
			c.Strings[p.str(0)] = p.str(1)
		}
	}
	return c, nil
}

// tensors reads field f of t, a vector of ort.fbs Tensor tables:
// name 0, doc_string 1, dims 2 ([int64]), data_type 3 (int32, ONNX's
// TensorProto enum), raw_data 4 ([uint8]), string_data 5, external offset 6.
func tensors(t table, f int) []Tensor {
	var out []Tensor
	for _, tt := range t.tables(f) {
		x := Tensor{Name: tt.str(0), DType: ort.DType(tt.i64(3, 4)), Shape: []int64{}}
		if p, n, ok := tt.vector(2); ok {
			for i := range n {
				x.Shape = append(x.Shape, int64(tt.fb.u64(p+8*i)))
			}
		}
		if p, n, ok := tt.vector(4); ok {
			x.Data = append([]byte(nil), tt.fb[p:p+n]...)
		}
		out = append(out, x)
	}
	return out
}

// flat is a flatbuffer; table is a table in it. Only what the checkpoint
// needs: scalar, string, table and vector-of-table fields.
type flat []byte

func (f flat) u32(p int) uint32 { return binary.LittleEndian.Uint32(f[p:]) }
func (f flat) u64(p int) uint64 { return binary.LittleEndian.Uint64(f[p:]) }

type table struct {
	fb  flat
	pos int
	vt  int // vtable position
}

func (f flat) table(pos int) table {
	return table{fb: f, pos: pos, vt: pos - int(int32(f.u32(pos)))}
}

// field returns the position of field i's data, or false when absent.
func (t table) field(i int) (int, bool) {
	vtLen := int(binary.LittleEndian.Uint16(t.fb[t.vt:]))
	o := 4 + 2*i
	if o+2 > vtLen {
		return 0, false
	}
	off := int(binary.LittleEndian.Uint16(t.fb[t.vt+o:]))
	return t.pos + off, off != 0
}

// i64 reads a scalar field of size bytes (1, 4 or 8), 0 when absent.
func (t table) i64(i, size int) int64 {
	p, ok := t.field(i)
	if !ok {
		return 0
	}
	switch size {
	case 1:
		return int64(t.fb[p])
	case 4:
		return int64(int32(t.fb.u32(p)))
	}
	return int64(t.fb.u64(p))
}

// deref follows the offset stored at p.
func (t table) deref(p int) int { return p + int(t.fb.u32(p)) }

func (t table) str(i int) string {
	p, ok := t.field(i)
	if !ok {
		return ""
	}
	s := t.deref(p)
	n := int(t.fb.u32(s))
	return string(t.fb[s+4 : s+4+n])
}

func (t table) child(i int) (table, bool) {
	p, ok := t.field(i)
	if !ok {
		return table{}, false
	}
	return t.fb.table(t.deref(p)), true
}

// vector returns the position of a vector field's first element and its
// length.
func (t table) vector(i int) (int, int, bool) {
	p, ok := t.field(i)
	if !ok {
		return 0, 0, false
	}
	v := t.deref(p)
	return v + 4, int(t.fb.u32(v)), true
}

func (t table) tables(i int) []table {
	p, n, ok := t.vector(i)
	if !ok {
		return nil
	}
	out := make([]table, n)
	for k := range n {
		out[k] = t.fb.table(t.deref(p + 4*k))
	}
	return out
}
