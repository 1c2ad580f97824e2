package graph

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/internal/fuzzguard"
	"github.com/ortrain/ortrain/ort/onnxpb"
)

// fuzzDataFile is the external data file beside every fuzzed model.
const fuzzDataFile = "w.bin"

// fuzzSeeds are models for FuzzLoad to start from: a small valid graph
// touching the ops whose inference reads constants, and the hostile
// initializers of TestHostileInitializers.
func fuzzSeeds(t testing.TB) [][]byte {
	var out [][]byte
	add := func(m *onnxpb.ModelProto) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}

	g := New("seed", EmitOpset)
	g.AddInput("x", Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 3, 4}})
	g.Dims["x"] = []string{"batch", "", ""}
	g.AddInitializer(Float32s("w", []int64{4, 2}, []float32{1, 2, 3, 4, 5, 6, 7, 8}))
	b := NewBuilder(g, "")
	y := b.MatMul("x", "w")
	r := b.Reshape(y, b.Ints(0, -1))
	s := b.Shape("x")
	c := b.Op("Constant", nil, ATensor("value", Int64s("", []int64{1}, []int64{0})))
	gi := b.Op("Gather", []string{s, c})
	u := b.Op("Unsqueeze", []string{gi, b.Ints(0)})
	z := b.Op("ConstantOfShape", []string{u}, ATensor("value", Int64s("", []int64{1}, []int64{7})))
	sl := b.Slice(r, []int64{0}, []int64{1}, []int64{1}, []int64{1})
	p := b.Pad(sl, []int64{0, 1, 0, 1})
	t2 := b.Transpose(p, 1, 0)
	cv := b.Op("Conv", []string{"x", b.Const(Float32s("", []int64{2, 3, 2}, make([]float32, 12)))}, AInts("strides", []int64{1}))
	g.Outputs = []string{t2, z, cv}
	add(g.ToModel())

	// Raw bytes held in the other fields, a float16 tensor, a scalar.
	m := g.ToModel()
	m.Graph.Initializer = append(m.Graph.Initializer,
		&onnxpb.TensorProto{Name: proto.String("i32"), DataType: proto.Int32(int32(dtype.Int32)), Dims: []int64{2}, Int32Data: []int32{1, -1}},
		&onnxpb.TensorProto{Name: proto.String("i64"), DataType: proto.Int32(int32(dtype.Int64)), Dims: []int64{1}, Int64Data: []int64{3}},
		&onnxpb.TensorProto{Name: proto.String("f64"), DataType: proto.Int32(int32(dtype.Float64)), Dims: []int64{}, DoubleData: []float64{0.5}},
		&onnxpb.TensorProto{Name: proto.String("f16"), DataType: proto.Int32(int32(dtype.Float16)), Dims: []int64{1}, Int32Data: []int32{0x3c00}},
		&onnxpb.TensorProto{Name: proto.String("f32"), DataType: proto.Int32(int32(dtype.Float32)), Dims: []int64{2}, FloatData: []float32{1, 2}})
	add(m)

	ext := func(loc string, off, length string, dims ...int64) *onnxpb.TensorProto {
		kv := []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String(loc)}}
		if off != "" {
			kv = append(kv, &onnxpb.StringStringEntryProto{Key: proto.String("offset"), Value: proto.String(off)})
		}
		if length != "" {
			kv = append(kv, &onnxpb.StringStringEntryProto{Key: proto.String("length"), Value: proto.String(length)})
		}
		return &onnxpb.TensorProto{Name: proto.String("w"), DataType: proto.Int32(int32(dtype.Float32)), Dims: dims,
			DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(), ExternalData: kv}
	}
	for _, init := range []*onnxpb.TensorProto{
		{Name: proto.String("w"), DataType: proto.Int32(int32(dtype.Float32)), Dims: []int64{2, -3}},
		{Name: proto.String("w"), DataType: proto.Int32(int32(dtype.Float32)), Dims: []int64{1 << 40, 1 << 40}, RawData: []byte{}},
		{Name: proto.String("w"), DataType: proto.Int32(int32(dtype.Float32)), Dims: []int64{2}, FloatData: []float32{1, 2, 3}},
		{Name: proto.String("w"), DataType: proto.Int32(int32(dtype.Float32)), Dims: []int64{1 << 30}, RawData: []byte{1, 2}},
		ext(fuzzDataFile, "", "", 4, 2),
		ext(fuzzDataFile, "16", "16", 4),
		ext(fuzzDataFile, "", "", 1<<30),
		ext("../"+fuzzDataFile, "", "", 2),
	} {
		h := New("t", EmitOpset)
		h.AddInitializer(init)
		h.AddInput("x", Info{DType: dtype.Float32, Known: true, Shape: []int64{2}})
		h.Outputs = []string{NewBuilder(h, "").Neg("x")}
		m := h.ToModel()
		m.Graph.Initializer = []*onnxpb.TensorProto{init}
		add(m)
	}

	// Ten tensors reading the whole 64-byte data file, each.
	m = g.ToModel()
	for i := range 10 {
		x := ext(fuzzDataFile, "0", "64", 16)
		x.Name = proto.String(fmt.Sprintf("ext%d", i))
		m.Graph.Initializer = append(m.Graph.Initializer, x)
	}
	add(m)

	// Found by reading the code: data fields longer than the one checked,
	// Constant tensors whose dimensions claim more than they hold, a
	// declared shape of absurd length, nodes missing their inputs. Built
	// as protos: building them with a Builder would run what they break.
	m = g.ToModel()
	m.Graph.Initializer = append(m.Graph.Initializer,
		&onnxpb.TensorProto{Name: proto.String("i32"), DataType: proto.Int32(int32(dtype.Int32)), Dims: []int64{1}, Int64Data: []int64{1}, Int32Data: []int32{1, 2, 3, 4}})
	add(m)
	node := func(op string, in []string, out string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: proto.String(op), Input: in, Output: []string{out}, Attribute: attrs}
	}
	model := func(nodes ...*onnxpb.NodeProto) *onnxpb.ModelProto {
		h := New("t", EmitOpset)
		h.AddInput("x", Info{DType: dtype.Float32, Known: true, Shape: []int64{2}})
		h.AddInput("s", Info{DType: dtype.Int64, Known: true, Shape: []int64{1 << 25}})
		m := h.ToModel()
		m.Graph.Node = nodes
		for _, n := range nodes {
			m.Graph.Output = append(m.Graph.Output, &onnxpb.ValueInfoProto{Name: proto.String(n.Output[0])})
		}
		return m
	}
	zero := ATensor("value", Int64s("", []int64{1}, []int64{0}))
	for _, dims := range [][]int64{{1 << 25}, {1 << 40}, {-1}} {
		add(model(node("Constant", nil, "c", ATensor("value", &onnxpb.TensorProto{DataType: proto.Int32(int32(dtype.Int64)), Dims: dims})),
			node("Reshape", []string{"x", "c"}, "r"), node("ConstantOfShape", []string{"c"}, "z", zero)))
	}
	add(model(node("Reshape", []string{"x", "s"}, "r"), node("ConstantOfShape", []string{"s"}, "z"), node("Expand", []string{"x", "s"}, "e")))
	add(model(node("Unsqueeze", nil, "u"), node("Shape", nil, "sh"), node("Identity", nil, "i"),
		node("Constant", nil, "c", ATensor("value", Int64s("", []int64{1}, []int64{-1}))), node("Where", []string{"c"}, "w"),
		node("ConstantOfShape", []string{"c"}, "z", zero)))
	return out
}

// FuzzLoad feeds arbitrary bytes as a model file (with a 64-byte external
// data file beside it) to Load, then reads every initializer and Constant
// as the trainer's passes do, and folds shapes as `artifacts build` does.
// It must not panic, must name the file in its errors, must hand back
// initializers whose data matches their type and shape, and must not
// allocate more than 64 MiB plus 100 times the input.
func FuzzLoad(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	// One folder per fuzzing process; inputs run one at a time in it.
	dir := f.TempDir()
	path := filepath.Join(dir, "m.onnx")
	data := make([]byte, 64)
	if err := os.WriteFile(filepath.Join(dir, fuzzDataFile), data, 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzzguard.Watchdog(10 * time.Second)()
		before := fuzzguard.Allocated()
		g, err := load(path, b) // Load after reading the file
		if err == nil {
			readAll(t, g)
		}
		if used, budget := fuzzguard.Allocated()-before, uint64(64<<20+100*(len(b)+len(data))); used > budget {
			t.Errorf("loading %d bytes allocated %d bytes (budget %d)", len(b), used, budget)
		}
		if err != nil && !strings.Contains(err.Error(), path) {
			t.Errorf("error does not name the file: %v", err)
		}
	})
}

// readAll reads the data of every initializer and Constant node of g and
// folds its shape arithmetic.
func readAll(t *testing.T, g *Graph) {
	for _, name := range g.InitOrder {
		init := g.Initializers[name]
		size := int64(dtype.DType(init.GetDataType()).Size())
		raw, err := RawBytes(init)
		if size == 0 {
			continue // a type ortrain does not read: an error or raw bytes
		}
		if err != nil {
			t.Errorf("initializer %q accepted, but reading it fails: %v", name, err)
			continue
		}
		if want := Numel(init) * size; int64(len(raw)) != want {
			t.Errorf("initializer %q: %d bytes, its type and shape %v need %d", name, len(raw), init.GetDims(), want)
		}
		FloatData(init)
		IntData(init)
	}
	for _, n := range g.Nodes {
		if n.Op == "Constant" {
			if c, ok := g.Const(n.Output(0)); ok {
				RawBytes(c)
				FloatData(c)
				IntData(c)
			}
		}
	}
	g.FoldShapes()
}

// TestExternalDataOverlap: initializers whose external ranges overlap, so
// that a small model would read its data file into memory many times over,
// are a TensorError naming the file.
func TestExternalDataOverlap(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	m := (&Graph{Name: "m", Opset: EmitOpset}).ToModel()
	for i := range 1000 {
		m.Graph.Initializer = append(m.Graph.Initializer, &onnxpb.TensorProto{Name: proto.String(fmt.Sprintf("w%d", i)),
			DataType: proto.Int32(int32(dtype.Float32)), Dims: []int64{1 << 18}, DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
			ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String("w.bin")}}})
	}
	raw, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.onnx")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var te *TensorError
	if _, err := Load(path); !errors.As(err, &te) || !strings.Contains(err.Error(), path) {
		t.Fatalf("1000 tensors over one 1 MiB file: err = %v, want a TensorError naming %s", err, path)
	}
}
