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
	"strings"
	"unicode/utf8"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/safefile"
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
	buf, err := safefile.ReadFile(path)
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
	// Everything copied out of the file is charged to its size: vectors
	// and strings are bounds-checked before allocating, and offsets that
	// make many tables share the same data cannot multiply it.
	fb := &flat{b: buf, left: len(buf)}
	root := fb.table(int(fb.u32(0)))
	c = &Checkpoint{Version: int32(root.i64(0, 4)), Ints: map[string]int64{}, Floats: map[string]float32{}, Strings: map[string]string{}}
	// ONNX Runtime always writes a version ≥ 1 and the module state: a
	// file without them is damaged (a flipped root offset reads as one).
	ms, ok := root.child(1)
	if c.Version < 1 || !ok {
		return nil, &FormatError{path, fmt.Sprintf("corrupt flatbuffer: no format version or module state (version %d)", c.Version)}
	}
	c.Nominal = ms.i64(2, 1) != 0
	if ms.i64(3, 1) != 0 {
		return nil, &FormatError{path, "the checkpoint keeps its tensors in an external data file, which ortrain does not read"}
	}
	c.Params = tensors(ms, 0)
	c.Frozen = tensors(ms, 1)
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
	seen := map[string]bool{}
	for _, group := range [][]Tensor{c.Params, c.Frozen} {
		for _, t := range group {
			if err := checkTensor(t, c.Nominal); err != "" {
				return nil, &FormatError{path, fmt.Sprintf("tensor %q: %s", t.Name, err)}
			}
			// An offset pointing at another tensor's table reads as a
			// duplicate; a damaged name field as an empty name.
			if t.Name == "" || seen[t.Name] || !utf8.ValidString(t.Name) || strings.ContainsRune(t.Name, 0) {
				return nil, &FormatError{path, fmt.Sprintf("parameter name %q is empty, repeated or not text", t.Name)}
			}
			seen[t.Name] = true
		}
	}
	for _, g := range c.Groups {
		for _, s := range g.States {
			for _, t := range s.Momentums {
				if err := checkTensor(t, c.Nominal); err != "" {
					return nil, &FormatError{path, fmt.Sprintf("optimizer state %q of %q: %s", t.Name, s.Param, err)}
				}
			}
		}
	}
	return c, nil
}

// checkTensor says what is wrong with a tensor whose dimensions, type and
// data do not agree ("" when nothing is): a flipped byte in a dimension or
// a length must not pass as a checkpoint. Nominal tensors hold no data.
func checkTensor(t Tensor, nominal bool) string {
	size := int64(t.DType.Size())
	if size == 0 {
		return fmt.Sprintf("data type %d, which ortrain does not read", int32(t.DType))
	}
	n := size
	for _, d := range t.Shape {
		if d < 0 || d > 0 && n > math.MaxInt64/d {
			return fmt.Sprintf("bad dimensions %v", t.Shape)
		}
		n *= d
	}
	if nominal && len(t.Data) == 0 {
		return ""
	}
	if int64(len(t.Data)) != n {
		return fmt.Sprintf("%d bytes of data, but %v %v needs %d", len(t.Data), t.DType, t.Shape, n)
	}
	return ""
}

// tensors reads field f of t, a vector of ort.fbs Tensor tables:
// name 0, doc_string 1, dims 2 ([int64]), data_type 3 (int32, ONNX's
// TensorProto enum), raw_data 4 ([uint8]), string_data 5, external offset 6.
func tensors(t table, f int) []Tensor {
	var out []Tensor
	for _, tt := range t.tables(f) {
		x := Tensor{Name: tt.str(0), DType: ort.DType(tt.i64(3, 4)), Shape: []int64{}}
		if p, n, ok := tt.vector(2, 8); ok {
			x.Shape = make([]int64, n)
			for i := range n {
				x.Shape[i] = int64(tt.fb.u64(p + 8*i))
			}
		}
		if p, n, ok := tt.vector(4, 1); ok {
			x.Data = append([]byte(nil), tt.fb.b[p:p+n]...)
		}
		out = append(out, x)
	}
	return out
}

// flat is a flatbuffer; table is a table in it. Only what the checkpoint
// needs: scalar, string, table and vector-of-table fields. Reads outside
// the buffer panic (parseCheckpoint recovers them as a FormatError).
type flat struct {
	b []byte
	// left is what may still be copied out (strings, vectors), starting
	// at the buffer's size: in a well-formed file nothing is read twice,
	// so a file whose offsets share data among many tables runs out of it
	// instead of multiplying its size in memory.
	left int
}

func (f *flat) u32(p int) uint32 { return binary.LittleEndian.Uint32(f.b[p:]) }
func (f *flat) u64(p int) uint64 { return binary.LittleEndian.Uint64(f.b[p:]) }

// charge takes n bytes of the budget before they are allocated.
func (f *flat) charge(n int) {
	if n > f.left {
		panic(fmt.Sprintf("offsets reuse data: reading %d more bytes than the %d-byte file holds", n-f.left, len(f.b)))
	}
	f.left -= n
}

type table struct {
	fb  *flat
	pos int
	vt  int // vtable position
}

// table reads the table at pos. FlatBuffers align tables to 4 bytes and
// vtables to 2; a position that is not is a damaged offset.
func (f *flat) table(pos int) table {
	t := table{fb: f, pos: pos, vt: pos - int(int32(f.u32(pos)))}
	if pos%4 != 0 || t.vt%2 != 0 {
		panic(fmt.Sprintf("misaligned table at offset %d (vtable %d)", pos, t.vt))
	}
	return t
}

// field returns the position of field i's data, or false when absent.
func (t table) field(i int) (int, bool) {
	vtLen := int(binary.LittleEndian.Uint16(t.fb.b[t.vt:]))
	o := 4 + 2*i
	if o+2 > vtLen {
		return 0, false
	}
	off := int(binary.LittleEndian.Uint16(t.fb.b[t.vt+o:]))
	if tblLen := int(binary.LittleEndian.Uint16(t.fb.b[t.vt+2:])); off >= tblLen && off != 0 {
		panic(fmt.Sprintf("field %d at %d lies outside its %d-byte table at offset %d", i, off, tblLen, t.pos))
	}
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
		return int64(t.fb.b[p])
	case 4:
		return int64(int32(t.fb.u32(p)))
	}
	return int64(t.fb.u64(p))
}

// deref follows the offset stored at p.
func (t table) deref(p int) int { return p + int(t.fb.u32(p)) }

func (t table) str(i int) string {
	p, n, ok := t.vector(i, 1)
	if !ok {
		return ""
	}
	// FlatBuffers end every string with a NUL; a damaged length does not.
	if p+n >= len(t.fb.b) || t.fb.b[p+n] != 0 {
		panic(fmt.Sprintf("string at offset %d has no terminating NUL after its %d bytes", p, n))
	}
	return string(t.fb.b[p : p+n])
}

func (t table) child(i int) (table, bool) {
	p, ok := t.field(i)
	if !ok {
		return table{}, false
	}
	return t.fb.table(t.deref(p)), true
}

// vector returns the position of a vector field's first element and its
// length, after checking that its elements of size bytes lie inside the
// buffer (a corrupt length of 0xFFFFFFFF must not be allocated for) and
// charging them to the budget.
func (t table) vector(i, size int) (int, int, bool) {
	p, ok := t.field(i)
	if !ok {
		return 0, 0, false
	}
	v := t.deref(p)
	n := int(t.fb.u32(v))
	if v%4 != 0 || size == 8 && (v+4)%8 != 0 {
		panic(fmt.Sprintf("misaligned vector at offset %d", v))
	}
	if n > (len(t.fb.b)-v-4)/size {
		panic(fmt.Sprintf("vector of %d %d-byte elements at offset %d runs past the end of the %d-byte file", n, size, v, len(t.fb.b)))
	}
	t.fb.charge(n * size)
	return v + 4, n, true
}

func (t table) tables(i int) []table {
	p, n, ok := t.vector(i, 4)
	if !ok {
		return nil
	}
	out := make([]table, n)
	for k := range n {
		out[k] = t.fb.table(t.deref(p + 4*k))
	}
	return out
}
