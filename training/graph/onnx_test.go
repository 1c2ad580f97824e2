package graph

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/onnxpb"
)

// TestExternalDataRoundTrip saves a large initializer to a side file and
// reads it back byte for byte; facts and symbolic dimensions survive.
func TestExternalDataRoundTrip(t *testing.T) {
	g := New("m", EmitOpset)
	g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
	g.Dims["x"] = []string{"batch", ""}
	w := make([]float32, 4*300)
	for i := range w {
		w[i] = float32(i)
	}
	g.AddInitializer(Float32s("w", []int64{4, 300}, w))
	y := NewBuilder(g, "").MatMul("x", "w")
	g.Outputs = []string{y}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.onnx")
	if err := g.Save(path, SaveOptions{ExternalThreshold: 1024}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".data"); err != nil {
		t.Fatal("no external data file written")
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := FloatData(back.Initializers["w"])
	if len(got) != len(w) || got[1199] != 1199 {
		t.Fatalf("external tensor read back wrong (%d values)", len(got))
	}
	if info := back.Info(y); info.String() != "float32[?,300]" || back.Dims["x"][0] != "batch" {
		t.Errorf("facts %v, dims %v", info, back.Dims["x"])
	}
}

// TestExternalDataConfined: locations outside the model's folder are
// refused before anything is opened.
func TestExternalDataConfined(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, make([]byte, 16), 0o644)
	os.Symlink(outside, filepath.Join(dir, "link"))
	for _, loc := range []string{"../secret", outside, "link", "a/../../secret"} {
		m := (&Graph{Name: "m", Opset: 17}).ToModel()
		m.Graph.Initializer = []*onnxpb.TensorProto{{Name: proto.String("w"), DataType: proto.Int32(1), Dims: []int64{4},
			DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(), ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String(loc)}}}}
		var pe *ExternalPathError
		if err := LoadExternal(m, dir); !errors.As(err, &pe) {
			t.Errorf("location %q: err = %v, want ExternalPathError", loc, err)
		}
	}
}

func TestUnsupportedOpset(t *testing.T) {
	m := (&Graph{Name: "m", Opset: 11}).ToModel()
	var oe *OpsetError
	if _, err := FromModel(m); !errors.As(err, &oe) || !oe.BadInput() {
		t.Errorf("opset 11: err = %v, want OpsetError", err)
	}
}

// TestHostileInitializers: initializers whose claims do not hold are bad
// input naming the tensor and the file, before anything is allocated for
// them: a negative dimension, dimensions whose product overflows, more or
// fewer values than the dimensions hold, external data past the end of
// its file or in a FIFO (which would block a reader forever).
func TestHostileInitializers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), make([]byte, 16), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.bin"), 0o644); err != nil {
		t.Fatal(err)
	}
	ext := func(loc string, dims ...int64) *onnxpb.TensorProto {
		return &onnxpb.TensorProto{Name: proto.String("w"), DataType: proto.Int32(int32(ort.Float32)), Dims: dims,
			DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
			ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String(loc)}}}
	}
	for name, init := range map[string]*onnxpb.TensorProto{
		"negative dimension": {Name: proto.String("w"), DataType: proto.Int32(int32(ort.Float32)), Dims: []int64{2, -3}},
		"overflowing dims":   {Name: proto.String("w"), DataType: proto.Int32(int32(ort.Float32)), Dims: []int64{1 << 40, 1 << 40}, RawData: []byte{}},
		"too many values":    {Name: proto.String("w"), DataType: proto.Int32(int32(ort.Float32)), Dims: []int64{2}, FloatData: []float32{1, 2, 3}},
		"too few raw bytes":  {Name: proto.String("w"), DataType: proto.Int32(int32(ort.Float32)), Dims: []int64{1 << 30}, RawData: []byte{1, 2}},
		"past the file end":  ext("w.bin", 1<<30),
		"a FIFO":             ext("fifo.bin", 2),
	} {
		g := New("t", EmitOpset)
		g.AddInitializer(init)
		g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{2}})
		b := NewBuilder(g, "")
		g.Outputs = []string{b.Neg("x")}
		m := g.ToModel()
		m.Graph.Initializer = []*onnxpb.TensorProto{init}
		raw, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "m.onnx")
		os.WriteFile(path, raw, 0o644)
		_, err = Load(path)
		var te *TensorError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"w"`) {
			t.Errorf("%s: %v, want a TensorError naming the tensor and %s", name, err, path)
		}
	}
}
