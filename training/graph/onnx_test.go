package graph

import (
	"errors"
	"io/fs"
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
// its file or in a FIFO (which would block a reader forever), an element
// type ONNX does not define.
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
		// A type ONNX does not define was kept as an unknown constant and
		// the parameter silently left out of training.
		"data_type 999": {Name: proto.String("w"), DataType: proto.Int32(999), Dims: []int64{2}, RawData: make([]byte, 8)},
		"data_type 0":   {Name: proto.String("w"), DataType: proto.Int32(0), Dims: []int64{2}, RawData: make([]byte, 8)},
		"no data_type":  {Name: proto.String("w"), Dims: []int64{2}, RawData: make([]byte, 8)},
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

// TestLoadBadFiles: a model file that is missing, empty, truncated, not
// ONNX at all, or whose external data file is missing is bad input (exit
// 2) naming the file by its absolute path and what is wrong with it.
func TestLoadBadFiles(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	g := New("m", EmitOpset)
	g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
	g.AddInitializer(Float32s("w", []int64{4, 300}, make([]float32, 1200)))
	g.Outputs = []string{NewBuilder(g, "").MatMul("x", "w")}
	good, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("empty.onnx", nil)
	write("trunc.onnx", good[:len(good)/2])
	write("text.onnx", []byte("this is not a model\n"))
	if err := g.Save(filepath.Join(dir, "ext.onnx"), SaveOptions{ExternalThreshold: 1024}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "ext.onnx.data")); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"missing.onnx": "does not exist",
		"empty.onnx":   "is empty",
		"trunc.onnx":   "is not an ONNX model",
		"text.onnx":    "is not an ONNX model",
		"ext.onnx":     "external data file " + filepath.Join(dir, "ext.onnx.data"),
		".":            "is a folder",
	} {
		_, err := Load(file) // relative: the error names the absolute path
		var bi interface{ BadInput() bool }
		if err == nil || !errors.As(err, &bi) || !bi.BadInput() {
			t.Errorf("%s: err = %v, want a bad-input error", file, err)
			continue
		}
		abs := filepath.Join(dir, file)
		if !strings.Contains(err.Error(), abs) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %q, want it to name %s and say %q", file, err, abs, want)
		}
		if file == "missing.onnx" && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v is not fs.ErrNotExist", file, err)
		}
	}
}

// TestReduceAllIsScalar: a reduction over every axis with keepdims=0 is a
// scalar even when its input's rank is unknown (a loss summed over a
// data-dependent number of detections).
func TestReduceAllIsScalar(t *testing.T) {
	g := New("m", EmitOpset)
	g.AddInput("x", Info{DType: ort.Float32})
	y := NewBuilder(g, "").ReduceSum("x", false)
	if info := g.Info(y); !info.Known || info.Rank() != 0 {
		t.Errorf("ReduceSum over all axes of an unknown-rank input: %v, want float32[]", info)
	}
}
