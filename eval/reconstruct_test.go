package eval_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/eval/sliding"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/data/volumes"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/safetensors"
)

// scalingAutoencoder is y = Conv3d(x, w) with a 1×1×1 kernel w = s and an L1
// loss against x: a model whose reconstruction is known exactly.
func scalingAutoencoder(t *testing.T, s float32) string {
	g := graph.New("scale", 17)
	g.AddInput("volume", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 1, 8, 8, 8}})
	g.Dims["volume"] = []string{"batch", "", "", "", ""}
	g.AddInitializer(graph.Float32s("conv.weight", []int64{1, 1, 1, 1, 1}, []float32{s}))
	b := graph.NewBuilder(g, "")
	b.OpInto("recon", "Conv", []string{"volume", "conv.weight"})
	g.Outputs = []string{"recon"}
	dir := filepath.Join(t.TempDir(), "artifacts")
	if _, err := artifacts.Build(artifacts.Options{Graph: g, Out: dir, Loss: "l1"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func weightsOf(t *testing.T, dir string) eval.WeightSource {
	ts, _, err := safetensors.Read(filepath.Join(dir, artifacts.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	return func(name string) (*ort.Value, error) {
		for _, x := range ts {
			if x.Name == name {
				return ort.NewTensorFromBytes(x.DType, x.Shape, x.Data)
			}
		}
		t.Fatalf("no weight %s", name)
		return nil, nil
	}
}

// TestReconstructMapsBackToIntensities runs a volume of 12×10×9 voxels in
// [-1000, 1000] through a model that halves its [-1, 1] input, with
// overlapping 8³ windows: every voxel must come back as the window's
// midpoint plus half its distance from it, in the volume's own units; a
// volume smaller than the patch comes back whole as well.
func TestReconstructMapsBackToIntensities(t *testing.T) {
	orttest.Init(t)
	dir := scalingAutoencoder(t, 0.5)
	m, err := eval.OpenModel(dir, weightsOf(t, dir), ort.Options{Device: orttest.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Patch() != [3]int{8, 8, 8} {
		t.Fatalf("patch %v, want the graph's 8×8×8", m.Patch())
	}
	shape := [3]int{12, 10, 9}
	vol := make([]float32, 12*10*9)
	for i := range vol {
		vol[i] = float32(i%2001) - 1000 + 500*float32(math.Sin(float64(i)))
	}
	w := volumes.Window{Low: -1000, High: 1000}
	for _, mode := range []sliding.Mode{sliding.Constant, sliding.Gaussian} {
		r, err := eval.Reconstruct(context.Background(), m, vol, shape, w, sliding.Options{Overlap: 0.5, Mode: mode, BatchSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		var clipped int64
		for _, v := range vol {
			if v < -1000 || v > 1000 {
				clipped++
			}
		}
		if r.Clipped != clipped || clipped == 0 || r.Window != [2]float64{-1000, 1000} {
			t.Errorf("%v: %d voxels clipped to window %v, want %d to [-1000, 1000]", mode, r.Clipped, r.Window, clipped)
		}
		for i, v := range vol {
			clamped := min(max(v, -1000), 1000)
			if r.Reference[i] != clamped {
				t.Fatalf("%v: reference[%d] = %g, want %g clamped to the window", mode, i, r.Reference[i], clamped)
			}
			if want := clamped / 2; math.Abs(float64(r.Recon[i]-want)) > 1e-3 {
				t.Fatalf("%v: recon[%d] = %g, want %g", mode, i, r.Recon[i], want)
			}
		}
	}
	// A volume thinner than the patch is padded as training pads it and
	// cropped back: every real voxel still maps back exactly.
	thin := vol[:7*10*5]
	r, err := eval.Reconstruct(context.Background(), m, thin, [3]int{7, 10, 5}, w, sliding.Options{})
	if err != nil {
		t.Fatalf("a volume thinner than the patch: %v", err)
	}
	if len(r.Recon) != len(thin) {
		t.Fatalf("reconstruction of %d voxels for %d", len(r.Recon), len(thin))
	}
	for i, v := range thin {
		if want := min(max(v, -1000), 1000) / 2; math.Abs(float64(r.Recon[i]-want)) > 1e-3 {
			t.Fatalf("thin volume: recon[%d] = %g, want %g", i, r.Recon[i], want)
		}
	}
}
