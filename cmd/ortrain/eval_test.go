package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/data/npy"
	"github.com/ortrain/ortrain/training/data/synthetic"
	"github.com/ortrain/ortrain/training/graph"
)

// TestEvalCheckpoint trains the linear classifier for a few steps, then
// evaluates its checkpoint as a user would: the metrics are printed and
// written once, a second evaluation into the same place is refused, and the
// checkpoint given with the config of a model of another shape is refused
// naming the parameter.
func TestEvalCheckpoint(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	art := filepath.Join(root, "art")
	linearArtifacts(t, art)
	cfg := filepath.Join(root, "run.toml")
	body := `name = "lin"
output_dir = "` + filepath.Join(root, "outputs") + `"
[model]
artifacts = "ART"
[data]
kind = "synthetic"
batch_size = 16
num_workers = 1
[trainer]
device = "cpu"
max_steps = 8
val_check_interval = 4
limit_val_batches = 2
checkpoint_every_n_steps = 4
[optimizer]
lr = 0.05
`
	os.WriteFile(cfg, []byte(strings.Replace(body, "ART", art, 1)), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	version := filepath.Join(root, "outputs", "lin", "version_0")

	out.Reset()
	errOut.Reset()
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("eval: exit %d: %s", code, errOut.String())
	}
	var res struct {
		Step int64
		Mean map[string]float64
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("eval --json printed %q: %v", out.String(), err)
	}
	if _, top5 := res.Mean["val/top5"]; res.Step != 8 || !(res.Mean["val/loss"] > 0) || !(res.Mean["val/top1"] >= 0 && res.Mean["val/top1"] <= 1) || top5 {
		t.Errorf("eval of step-8 checkpoint: %+v, want step 8, a positive val/loss, val/top1 in [0,1], no val/top5 with 3 classes", res)
	}
	written := filepath.Join(version, "eval", "step-000000008", "metrics.json")
	if _, err := os.Stat(written); err != nil {
		t.Errorf("metrics.json not written where documented: %v", err)
	}
	if code := run([]string{"ortrain", "eval", "--checkpoint", version}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "exists") {
		t.Errorf("a second eval into the same place: exit %d, %s; want 2 and no overwrite", code, errOut.String())
	}
	// The run's report shows the evaluation saved in the run.
	runReport := filepath.Join(root, "run.html")
	if code := run([]string{"ortrain", "report", version, "--out", runReport}, &out, &errOut); code != 0 {
		t.Errorf("report: exit %d, %s", code, errOut.String())
	}
	if page, _ := os.ReadFile(runReport); !strings.Contains(string(page), "Evaluation of step-000000008, step 8") || !strings.Contains(string(page), "val/top1") {
		t.Error("the run's report lacks the evaluation of its step-8 checkpoint")
	}

	// --set without --config applies to the checkpoint's configuration:
	// an unknown key is refused rather than ignored.
	errOut.Reset()
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--out-dir", filepath.Join(root, "e4"), "--set", "trainer.max_stpes=1"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "trainer.max_stpes") {
		t.Errorf("eval --set with a typo, no --config: exit %d, %q; want 2 naming the key", code, errOut.String())
	}

	// An existing report file is refused before anything is written, and
	// replaced with --overwrite.
	rep := filepath.Join(root, "mine.html")
	os.WriteFile(rep, []byte("mine"), 0o644)
	errOut.Reset()
	e3 := filepath.Join(root, "e3")
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--out-dir", e3, "--report", rep}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), rep) {
		t.Errorf("eval --report over an existing file: exit %d, %q; want 2 naming it", code, errOut.String())
	}
	if b, _ := os.ReadFile(rep); string(b) != "mine" {
		t.Error("the refused eval changed the report file")
	}
	if _, err := os.Stat(e3); err == nil {
		t.Error("the refused eval wrote its metrics")
	}
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--out-dir", e3, "--report", rep, "--overwrite"}, &out, &errOut); code != 0 {
		t.Errorf("eval --report --overwrite: exit %d, %s", code, errOut.String())
	}
	if b, _ := os.ReadFile(rep); !strings.Contains(string(b), "</html>") {
		t.Error("eval --overwrite did not write the report")
	}

	// A model with 5 inputs instead of 4: the checkpoint does not fit it.
	other := filepath.Join(root, "other")
	g := graph.New("wide", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 5}})
	g.Dims["x"] = []string{"batch", ""}
	g.AddInitializer(graph.Float32s("w", []int64{5, 3}, make([]float32, 15)))
	g.AddInitializer(graph.Float32s("b", []int64{3}, make([]float32, 3)))
	b := graph.NewBuilder(g, "")
	b.OpInto("logits", "Add", []string{b.MatMul("x", "w"), "b"})
	g.Outputs = []string{"logits"}
	if _, err := artifacts.Build(artifacts.Options{Graph: g, Out: other, Loss: "cross_entropy"}); err != nil {
		t.Fatal(err)
	}
	otherCfg := filepath.Join(root, "other.toml")
	os.WriteFile(otherCfg, []byte(strings.Replace(body, "ART", other, 1)), 0o644)
	errOut.Reset()
	code := run([]string{"ortrain", "eval", "--checkpoint", version, "--config", otherCfg, "--out-dir", filepath.Join(root, "e2")}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "does not match") || !strings.Contains(errOut.String(), "parameter w") {
		t.Errorf("checkpoint of another model: exit %d, %q; want 2 naming parameter w", code, errOut.String())
	}
}

// TestEvalReferenceMode: eval --input --reference refuses every flag of
// the checkpoint mode, naming it (it would be ignored), and bad values of
// its own flags before a file is read; --out-dir writes metrics.json and
// metrics.csv; NIfTI files of other spacing or orientation are warned of;
// a .npy compared with a NIfTI is explained in the axis order both are
// read in; a constant reference is named as such.
func TestEvalReferenceMode(t *testing.T) {
	dir := t.TempDir()
	shape := [3]int{12, 14, 12} // z, y, x
	n := shape[0] * shape[1] * shape[2]
	ref, rec := make([]float32, n), make([]float32, n)
	for i := range ref {
		ref[i] = float32(i%97) * 10
		rec[i] = ref[i] + float32(i%5) - 2
	}
	var h nifti.Header
	h.Dim = [8]int64{3, int64(shape[2]), int64(shape[1]), int64(shape[0]), 1, 1, 1, 1}
	h.PixDim = [8]float64{1, 0.8, 0.8, 1.5, 1, 1, 1, 1}
	write := func(name string, h nifti.Header, data []float32) string {
		p := filepath.Join(dir, name)
		if err := nifti.Write(p, h, data); err != nil {
			t.Fatal(err)
		}
		return p
	}
	refPath, recPath := write("ref.nii.gz", h, ref), write("rec.nii.gz", h, rec)
	eval := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"ortrain", "eval"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	base := []string{"--input", recPath, "--reference", refPath}
	missing := filepath.Join(dir, "missing.nii.gz")
	for _, c := range []struct {
		args []string
		say  string
	}{
		{[]string{"--out", filepath.Join(dir, "x.npy")}, "--out is where a checkpoint's reconstruction"},
		{[]string{"--overlap", "0.5"}, "--overlap is"},
		{[]string{"--blend", "constant"}, "--blend is"},
		{[]string{"--batch-size", "8"}, "--batch-size is"},
		{[]string{"--device", "cpu"}, "--device is"},
		{[]string{"--set", "a.b=1"}, "--set is"},
		{[]string{"--config", "nonexist.toml"}, "--config is"},
		{[]string{"--generate", "3", "--steps", "4", "--seed", "3"}, "--generate, --steps, --seed apply to --checkpoint"},
		{[]string{"--temperature", "0.5"}, "--temperature is"},
		{[]string{"--top-p", "0.5"}, "--top-p is"},
	} {
		code, _, stderr := eval(append(slices.Clone(base), c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.say) || !strings.Contains(stderr, "--reference compares") {
			t.Errorf("eval --reference %v: exit %d, %q; want 2 saying %q", c.args, code, stderr, c.say)
		}
	}
	// Bad values are flag errors, before any file is read.
	for _, c := range []struct {
		args []string
		say  string
	}{
		{[]string{"--data-range", "0"}, "--data-range 0: want"},
		{[]string{"--data-range", "nan"}, "--data-range NaN: want"},
		{[]string{"--data-range", "-1"}, "--data-range -1: want"},
		{[]string{"--data-range", "inf"}, "--data-range +Inf: want"},
	} {
		code, _, stderr := eval(append([]string{"--input", missing, "--reference", missing}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.say) || strings.Contains(stderr, missing) {
			t.Errorf("eval %v: exit %d, %q; want 2 saying %q, not about the file", c.args, code, stderr, c.say)
		}
	}
	for _, ov := range []string{"nan", "1", "-0.1"} {
		code, _, stderr := eval("--checkpoint", missing, "--overlap", ov)
		if code != 2 || !strings.Contains(stderr, "--overlap") || strings.Contains(stderr, missing) {
			t.Errorf("eval --overlap %s: exit %d, %q; want 2 naming --overlap, before the checkpoint is looked at", ov, code, stderr)
		}
	}

	// --out-dir: metrics.json as --json prints it, metrics.csv with every
	// metric; not over existing ones.
	outDir := filepath.Join(dir, "m")
	code, stdout, stderr := eval(append(slices.Clone(base), "--out-dir", outDir, "--data-range", "1000")...)
	if code != 0 || stderr != "" || !strings.Contains(stdout, "data range 1000") {
		t.Fatalf("eval --out-dir: exit %d, %q, %q", code, stdout, stderr)
	}
	var m struct {
		DataRange float64 `json:"data_range"`
		MAE       float64 `json:"mae"`
	}
	b, err := os.ReadFile(filepath.Join(outDir, "metrics.json"))
	if err := errors.Join(err, json.Unmarshal(b, &m)); err != nil || m.DataRange != 1000 || !(m.MAE > 0) {
		t.Errorf("metrics.json %s (%v): want data_range 1000 and the MAE", b, err)
	}
	csvText, _ := os.ReadFile(filepath.Join(outDir, "metrics.csv"))
	for _, row := range []string{"metric,value\n", "\npsnr,", "\nssim,", "\nms_ssim,not computed\n", "\nmae,", "\nmse,", "\ndata_range,1000\n"} {
		if !strings.Contains(string(csvText), row) {
			t.Errorf("metrics.csv lacks %q:\n%s", row, csvText)
		}
	}
	if code, _, stderr := eval(append(slices.Clone(base), "--out-dir", outDir)...); code != 2 || !strings.Contains(stderr, "metrics.json exists") {
		t.Errorf("eval --out-dir over metrics.json: exit %d, %q; want 2", code, stderr)
	}

	// Geometry: another spacing, a flipped affine.
	h2 := h
	h2.PixDim[1], h2.PixDim[2], h2.PixDim[3] = 2, 2, 2
	code, _, stderr = eval("--input", write("spaced.nii.gz", h2, rec), "--reference", refPath)
	if code != 0 || !strings.Contains(stderr, "warning: the voxel spacing differs") || !strings.Contains(stderr, "2 × 2 × 2 mm") {
		t.Errorf("another spacing: exit %d, %q; want a warning naming both spacings", code, stderr)
	}
	h3 := h
	h3.SformCode, h3.SRowX, h3.SRowY, h3.SRowZ = 1, [4]float64{-0.8, 0, 0, 10}, [4]float64{0, 0.8, 0, 0}, [4]float64{0, 0, 1.5, 0}
	code, _, stderr = eval("--input", write("flipped.nii.gz", h3, rec), "--reference", refPath)
	if code != 0 || !strings.Contains(stderr, "warning: the voxel-to-world transform (affine) differs") {
		t.Errorf("a flipped affine: exit %d, %q; want a warning", code, stderr)
	}

	// A .npy in nibabel's [x,y,z] order: refused with the axis order
	// explained when the shape shows it, warned of when it cannot.
	xyz := make([]float32, n)
	for z := range shape[0] {
		for y := range shape[1] {
			for x := range shape[2] {
				xyz[(x*shape[1]+y)*shape[0]+z] = rec[(z*shape[1]+y)*shape[2]+x]
			}
		}
	}
	cube := filepath.Join(dir, "fromnib.npy")
	if err := npy.Write(cube, []int{shape[2], shape[1], shape[0]}, xyz); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = eval("--input", cube, "--reference", refPath)
	if code != 0 || !strings.Contains(stderr, "with its axes reversed") || !strings.Contains(stderr, "np.save(path, vol.T)") {
		t.Errorf("a transposed .npy against a NIfTI: exit %d, %q; want a warning on the axis order", code, stderr)
	}
	h4 := h
	h4.Dim[1] = 11
	other := write("other.nii.gz", h4, ref[:11*14*12])
	bad := filepath.Join(dir, "thin.npy")
	npy.Write(bad, []int{11, 14, 12}, xyz[:11*14*12])
	code, _, stderr = eval("--input", bad, "--reference", other)
	if code != 2 || !strings.Contains(stderr, "ortrain reads a .npy in NumPy's index order [z,y,x]") || !strings.Contains(stderr, "the .npy's axes are those of the NIfTI reversed") {
		t.Errorf("a .npy of the NIfTI's shape reversed: exit %d, %q; want 2 explaining the axis order", code, stderr)
	}

	// A constant reference is the reference's fault, named.
	flat := write("flat.nii.gz", h, make([]float32, n))
	code, _, stderr = eval("--input", recPath, "--reference", flat)
	if code != 2 || !strings.HasPrefix(stderr, "ortrain: "+flat+": the reference is constant") {
		t.Errorf("a constant reference: exit %d, %q; want 2 naming %s", code, stderr, flat)
	}
}

// TestEvalBadImages: a classifier's validation folder holding a file that
// is not an image, an empty one and a truncated PNG is bad input (exit 2)
// naming the file; with data.skip_bad_files they are dropped and listed,
// and val/skipped_samples counts them; volume-only flags are refused for
// a classifier rather than ignored.
func TestEvalBadImages(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	train, val := filepath.Join(root, "train"), filepath.Join(root, "val")
	if _, err := synthetic.WriteImageFolder(train, 3, 2, 32, 32, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := synthetic.WriteImageFolder(val, 3, 4, 32, 32, 2); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "run.toml")
	os.WriteFile(cfg, []byte(`name = "cls"
output_dir = "`+filepath.Join(root, "outputs")+`"
[model]
recipe = "resnet"
loss = "cross_entropy"
[model.params]
depth = 18
classes = 3
width = 4
image_size = 32
[data]
kind = "images"
train = "`+train+`"
val = "`+val+`"
batch_size = 2
num_workers = 1
[data.images]
size = 32
[trainer]
device = "cpu"
max_steps = 1
val_check_interval = 1
[optimizer]
name = "sgd"
lr = 0.05
`), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	version := filepath.Join(root, "outputs", "cls", "version_0")
	pngs, _ := filepath.Glob(filepath.Join(val, "class00", "*.png"))
	if len(pngs) == 0 {
		t.Fatal("no PNG in the validation folder")
	}
	png, _ := os.ReadFile(pngs[0])
	bad := map[string][]byte{
		filepath.Join(val, "class01", "zz_bad.png"): []byte("not an image\n"),
		filepath.Join(val, "class01", "empty.png"):  nil,
		filepath.Join(val, "class02", "trunc.png"):  png[:len(png)/3],
	}
	for name, body := range bad {
		os.WriteFile(name, body, 0o644)
		errOut.Reset()
		code := run([]string{"ortrain", "eval", "--checkpoint", version, "--out-dir", filepath.Join(root, "e-"+filepath.Base(name))}, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), name) {
			t.Errorf("eval with %s in the validation folder: exit %d, %q; want 2 naming it", name, code, errOut.String())
		}
		os.Remove(name)
	}
	for name, body := range bad {
		os.WriteFile(name, body, 0o644)
	}
	out.Reset()
	errOut.Reset()
	code := run([]string{"ortrain", "eval", "--checkpoint", version, "--set", "data.skip_bad_files=true", "--out-dir", filepath.Join(root, "skip"), "--json"}, &out, &errOut)
	var res struct {
		Mean    map[string]float64
		Skipped []string `json:"skipped_files"`
	}
	if code != 0 || json.Unmarshal(out.Bytes(), &res) != nil {
		t.Fatalf("eval with data.skip_bad_files: exit %d, %q, %q", code, out.String(), errOut.String())
	}
	if res.Mean["val/skipped_samples"] != 3 || len(res.Skipped) != 3 || !strings.Contains(errOut.String(), "dropped 3 validation samples") {
		t.Errorf("skipping bad files: mean %v, skipped_files %q, stderr %q; want 3 counted, listed and said", res.Mean, res.Skipped, errOut.String())
	}
	for name := range bad {
		if !strings.Contains(errOut.String(), name) || !strings.Contains(strings.Join(res.Skipped, "\n"), name) {
			t.Errorf("%s is not listed as skipped: %q", name, errOut.String())
		}
	}

	for name := range bad {
		os.Remove(name)
	}
	errOut.Reset()
	code = run([]string{"ortrain", "eval", "--checkpoint", version, "--overlap", "0.5", "--data-range", "2", "--out-dir", filepath.Join(root, "vol")}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "--overlap, --data-range: only volume models") {
		t.Errorf("volume flags on a classifier: exit %d, %q; want 2 naming them", code, errOut.String())
	}
}

// TestEvalVolumeCheckpoint trains a tiny VQ-GAN on 12³ volumes for a step
// and evaluates it as a user would: progress per volume on stderr (and the
// window count of an extreme --overlap up front), --data-range used and
// recorded, the intensity window and the clamping of the reference to it
// recorded, and every volume's PSNR, SSIM, MS-SSIM, MAE and MSE in
// metrics.csv at full precision.
func TestEvalVolumeCheckpoint(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	vols := filepath.Join(root, "vols")
	os.MkdirAll(vols, 0o755)
	var h nifti.Header
	h.Dim = [8]int64{3, 12, 12, 12, 1, 1, 1, 1}
	h.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	for i := range 2 {
		vol := make([]float32, 12*12*12)
		for j := range vol {
			vol[j] = float32((j*(i+3))%250 - 125)
		}
		if err := nifti.Write(filepath.Join(vols, fmt.Sprintf("case%d.nii.gz", i)), h, vol); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(root, "vq.toml")
	os.WriteFile(cfg, []byte(`name = "vq"
output_dir = "`+filepath.Join(root, "outputs")+`"
[model]
recipe = "vqgan3d"
[model.params]
patch_size = [8, 8, 8]
channels = 4
channel_mult = [1, 2]
res_blocks = 1
z_channels = 4
embed_dim = 4
codebook_size = 16
groups = 2
[data]
kind = "volumes"
train = "`+vols+`"
val = "`+vols+`"
num_workers = 0
[data.volumes]
patch_size = [8, 8, 8]
window = [-100, 100]
[trainer]
device = "cpu"
max_steps = 1
`), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	version := filepath.Join(root, "outputs", "vq", "version_0")
	eval := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"ortrain", "eval", "--checkpoint", version}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	e1 := filepath.Join(root, "e1")
	code, stdout, stderr := eval("--out-dir", e1)
	if code != 0 {
		t.Fatalf("eval: exit %d, %s", code, stderr)
	}
	for _, want := range []string{"reconstructing volume 1/2 case0: 8 windows of 8×8×8 voxels", "reconstructed volume 2/2 case1: 8 windows in"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("eval's progress lacks %q: %q", want, stderr)
		}
	}
	printed := map[string]string{}
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			printed[f[0]] = strings.Join(f[1:], " ")
		}
	}
	for _, name := range []string{"case0/ms_ssim", "ms_ssim", "case1/mae", "case1/mse", "case1/psnr", "case1/ssim"} {
		if v, ok := printed[name]; !ok || (strings.HasSuffix(name, "ms_ssim") && v != "not computed") {
			t.Errorf("the printed summary's %s: %q (%v):\n%s", name, v, ok, stdout)
		}
	}
	csvText, _ := os.ReadFile(filepath.Join(e1, "metrics.csv"))
	js, _ := os.ReadFile(filepath.Join(e1, "metrics.json"))
	for _, want := range []string{"\ncase0/ms_ssim,not computed\n", "\ncase0/mae,", "\ncase0/mse,"} {
		if !strings.Contains(string(csvText), want) {
			t.Errorf("metrics.csv lacks %q:\n%s", want, csvText)
		}
	}
	var res struct {
		Window           []float64      `json:"window"`
		ReferenceClipped bool           `json:"reference_clipped"`
		DataRange        float64        `json:"data_range"`
		MeanOf           map[string]int `json:"mean_of"`
		Volumes          []struct {
			DataRange float64 `json:"data_range"`
			PSNR      float64 `json:"psnr"`
			Clipped   int64   `json:"clipped_voxels"`
		}
	}
	if err := json.Unmarshal(js, &res); err != nil || !slices.Equal(res.Window, []float64{-100, 100}) || !res.ReferenceClipped ||
		len(res.Volumes) != 2 || res.Volumes[0].DataRange != 200 || res.Volumes[0].Clipped == 0 || res.MeanOf["psnr"] != 2 {
		t.Errorf("metrics.json (%v): %s; want the window, reference_clipped, data range 200, clipped voxels, mean_of", err, js)
	}

	code, stdout, stderr = eval("--out-dir", filepath.Join(root, "e2"), "--data-range", "4000", "--json")
	var res2 struct {
		DataRange float64 `json:"data_range"`
		Volumes   []struct {
			DataRange float64 `json:"data_range"`
			PSNR      float64 `json:"psnr"`
		}
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &res2) != nil || res2.DataRange != 4000 || len(res2.Volumes) != 2 || res2.Volumes[0].DataRange != 4000 {
		t.Fatalf("eval --data-range 4000: exit %d, %s, %s; want data_range 4000 used and recorded", code, stdout, stderr)
	}
	if d := res2.Volumes[0].PSNR - res.Volumes[0].PSNR; math.Abs(d-20*math.Log10(20)) > 1e-6 {
		t.Errorf("PSNR with --data-range 4000 is %g, with the window's 200 %g: want 26.02 dB more", res2.Volumes[0].PSNR, res.Volumes[0].PSNR)
	}

	// An overlap of 0.9 asks for 125 windows a volume where 0.25 asks for 8.
	code, _, stderr = eval("--out-dir", filepath.Join(root, "e3"), "--overlap", "0.9", "--batch-size", "32")
	if code != 0 || !strings.Contains(stderr, "note: --overlap 0.9 asks for 125 windows for this volume, 16 times the 8 of the default 0.25") {
		t.Errorf("eval --overlap 0.9: exit %d, %q; want the window count said", code, stderr)
	}
}
