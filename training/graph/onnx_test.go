package graph

import (
	"errors"
	"os"
	"path/filepath"
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
