package export

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
)

var (
	tinyResNet = map[string]any{"depth": int64(18), "width": int64(8), "image_size": int64(32), "classes": int64(4), "label_smoothing": 0.1, "seed": int64(3)}
	tinyVQGAN  = map[string]any{"patch_size": []any{int64(8), int64(8), int64(8)}, "channels": int64(8), "channel_mult": []any{int64(1), int64(2)},
		"res_blocks": int64(1), "z_channels": int64(4), "embed_dim": int64(4), "codebook_size": int64(16), "groups": int64(4), "seed": int64(1)}
)

// TestExportBuilds: the exported tiny ResNet (with the --loss the result
// names: label-smoothed cross-entropy) and tiny VQ-GAN (whose own loss
// output and StopGradient markers the file keeps, default --loss) are
// accepted by artifacts.Build and train exactly the recipe's parameter
// count; stripping removes every marker from the file.
func TestExportBuilds(t *testing.T) {
	for _, tc := range []struct {
		recipe      string
		params      map[string]any
		strip       bool
		wantMarkers bool
	}{
		{"resnet", tinyResNet, false, false},
		{"vqgan3d", tinyVQGAN, false, true},
		{"vqgan3d", tinyVQGAN, true, false},
	} {
		t.Run(tc.recipe, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "fwd.onnx")
			res, err := Recipe(Options{Recipe: tc.recipe, Params: tc.params, Out: out, StripMarkers: tc.strip})
			if err != nil {
				t.Fatal(err)
			}
			if (res.Markers > 0) != tc.wantMarkers {
				t.Errorf("%d markers, want some: %v", res.Markers, tc.wantMarkers)
			}
			if hasLoss := slices.Contains(res.Outputs, "loss"); hasLoss == (res.Loss != "") {
				t.Errorf("outputs %v, --loss %q: want a loss output or a --loss, one of them", res.Outputs, res.Loss)
			}
			g, err := graph.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			markers := 0
			for _, n := range g.Nodes {
				if graph.IsStopGradient(n) {
					markers++
				}
			}
			if markers != res.Markers {
				t.Errorf("file has %d markers, result says %d", markers, res.Markers)
			}
			if tc.strip {
				return // a stripped file is for viewers
			}
			m, err := artifacts.Build(artifacts.Options{Model: out, Out: filepath.Join(dir, "art"), Loss: res.Loss, LabelSmoothing: res.LabelSmoothing})
			if err != nil {
				t.Fatalf("artifacts build of the export: %v", err)
			}
			if m.ParamCount() != res.Params {
				t.Errorf("artifacts train %d parameters, the recipe has %d", m.ParamCount(), res.Params)
			}
		})
	}
}

// TestExportRefuses: an existing output (or its data file) is left as it
// was; an unknown recipe or parameter is a bad-input error naming it.
func TestExportRefuses(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "fwd.onnx")
	dataOnly := filepath.Join(dir, "other.onnx")
	for _, f := range []string{existing, dataOnly + ".data"} {
		if err := os.WriteFile(f, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		o    Options
		say  string
	}{
		{"existing file", Options{Recipe: "resnet", Params: tinyResNet, Out: existing}, "not overwriting"},
		{"existing data file", Options{Recipe: "resnet", Params: tinyResNet, Out: dataOnly}, "other.onnx.data exists"},
		{"unknown recipe", Options{Recipe: "unet", Out: filepath.Join(dir, "a.onnx")}, "unet"},
		{"unknown parameter", Options{Recipe: "resnet", Params: map[string]any{"dept": int64(18)}, Out: filepath.Join(dir, "b.onnx")}, "dept"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Recipe(tc.o)
			bad, ok := err.(interface{ BadInput() bool })
			if err == nil || !strings.Contains(err.Error(), tc.say) || !ok || !bad.BadInput() {
				t.Errorf("err = %v, want a bad-input error saying %q", err, tc.say)
			}
		})
	}
	for _, f := range []string{existing, dataOnly + ".data"} {
		if b, _ := os.ReadFile(f); !bytes.Equal(b, []byte("keep")) {
			t.Errorf("%s was changed", f)
		}
	}
}
