package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

// TestMixUpCutMixTrain: a ResNet on an image folder with MixUp and CutMix
// trains on class probabilities (the loss's target is [batch, classes]
// floats fed by the loader's mixed soft labels), validation still reports
// top-1 against the class indices, eval of the checkpoint agrees, and
// mixing a model whose loss is not cross-entropy is refused.
func TestMixUpCutMixTrain(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	train, val := filepath.Join(root, "train"), filepath.Join(root, "val")
	if _, err := synthetic.WriteImageFolder(train, 3, 4, 40, 32, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := synthetic.WriteImageFolder(val, 3, 2, 40, 32, 2); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "run.toml")
	body := `name = "mix"
output_dir = "` + filepath.Join(root, "outputs") + `"
[model]
recipe = "resnet"
loss = "cross_entropy"
[model.params]
depth = 18
classes = 3
width = 8
image_size = 32
[data]
kind = "images"
train = "` + train + `"
val = "` + val + `"
batch_size = 4
num_workers = 1
[data.images]
size = 32
mixup_alpha = 0.2
cutmix_alpha = 1.0
[trainer]
device = "cpu"
max_steps = 3
val_check_interval = 3
monitor = "val/top1"
mode = "max"
[optimizer]
name = "sgd"
lr = 0.05
momentum = 0.9
`
	os.WriteFile(cfg, []byte(body), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	version := filepath.Join(root, "outputs", "mix", "version_0")
	m, err := artifacts.Load(filepath.Join(version, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	soft := false
	for _, d := range m.Data {
		soft = soft || d.Name == "target" && d.DType == "float32" && len(d.Shape) == 2 && d.Shape[1] == 3
	}
	if !soft || !m.LossSpec.SoftTargets {
		t.Errorf("artifacts' data %+v: want a float32 target [batch, 3] of class probabilities", m.Data)
	}
	if csv, _ := os.ReadFile(filepath.Join(version, "metrics.csv")); !strings.Contains(string(csv), "val/top1") {
		t.Errorf("validation reports no top-1:\n%s", csv)
	}
	out.Reset()
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("eval: exit %d: %s", code, errOut.String())
	}
	var res struct{ Mean map[string]float64 }
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if acc, ok := res.Mean["val/top1"]; !ok || acc < 0 || acc > 1 || !(res.Mean["val/loss"] > 0) {
		t.Errorf("eval: %v; want val/top1 in [0, 1] and a positive val/loss", res.Mean)
	}

	errOut.Reset()
	bad := strings.Replace(strings.Replace(body, `recipe = "resnet"`, `recipe = "vqgan3d"`, 1), `kind = "images"`, `kind = "volumes"`, 1)
	os.WriteFile(cfg, []byte(bad), 0o644)
	if code := run([]string{"ortrain", "plan", "--config", cfg}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "mixup_alpha") {
		t.Errorf("mixing volumes: exit %d, %q; want 2 naming data.images.mixup_alpha", code, errOut.String())
	}
}

// TestClassesTravelWithTheCheckpoint: a checkpoint records the class
// folders its labels number; eval labels a validation folder lacking a
// class by them without data.train at hand, and a resume after a class
// folder was renamed is refused (the labels would change meaning).
func TestClassesTravelWithTheCheckpoint(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	train, val := filepath.Join(root, "train"), filepath.Join(root, "val")
	if _, err := synthetic.WriteImageFolder(train, 3, 4, 40, 32, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := synthetic.WriteImageFolder(val, 3, 2, 40, 32, 2); err != nil {
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
width = 8
image_size = 32
[data]
kind = "images"
train = "`+train+`"
val = "`+val+`"
batch_size = 4
num_workers = 1
[data.images]
size = 32
[trainer]
device = "cpu"
max_steps = 2
val_check_interval = 2
[optimizer]
name = "sgd"
lr = 0.05
`), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	version := filepath.Join(root, "outputs", "cls", "version_0")
	st, err := checkpoint.ReadState(filepath.Join(version, "checkpoints", "last"))
	if err != nil || len(st.Classes) != 3 {
		t.Fatalf("the checkpoint's classes %v (%v); want the 3 class folders", st.Classes, err)
	}
	evalTop1 := func(dir string) float64 {
		t.Helper()
		out.Reset()
		errOut.Reset()
		if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--out-dir", dir, "--json"}, &out, &errOut); code != 0 {
			t.Fatalf("eval: exit %d: %s", code, errOut.String())
		}
		var res struct{ Mean map[string]float64 }
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		return res.Mean["val/top1"]
	}
	// The last class's images scored alone: eval without data.train and
	// with the other classes' folders gone labels them as training did.
	full := evalTop1(filepath.Join(root, "e1"))
	os.Rename(train, train+".away")
	for _, c := range st.Classes[:2] {
		os.Rename(filepath.Join(val, c), filepath.Join(root, "held-"+c))
	}
	last := evalTop1(filepath.Join(root, "e2"))
	for _, c := range st.Classes[:2] {
		os.Rename(filepath.Join(root, "held-"+c), filepath.Join(val, c))
	}
	os.Rename(train+".away", train)
	if again := evalTop1(filepath.Join(root, "e3")); again != full {
		t.Errorf("eval top-1 %v after the folders came back, %v before", again, full)
	}
	t.Logf("val/top1: %v on all classes, %v on the last class alone, without data.train", full, last)

	// A class folder renamed: as many classes, other labels.
	for _, dir := range []string{train, val} {
		if err := os.Rename(filepath.Join(dir, st.Classes[0]), filepath.Join(dir, "zzz")); err != nil {
			t.Fatal(err)
		}
	}
	// The refusal names the folders that differ and writes nothing into
	// the run (no config.resume-1.toml for the changed max_steps, no
	// events file, metrics.csv whole).
	errOut.Reset()
	before := snapshot(t, version)
	if code := run([]string{"ortrain", "train", "--config", cfg, "--resume", "last", "--set", "trainer.max_steps=4"}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "class folders") || !strings.Contains(errOut.String(), "new zzz; missing "+st.Classes[0]) {
		t.Errorf("resume after a class folder was renamed: exit %d, %q; want 2 naming zzz and %s", code, errOut.String(), st.Classes[0])
	}
	if after := snapshot(t, version); !maps.Equal(before, after) {
		t.Errorf("the refused resume changed the run:\nbefore %v\nafter  %v", before, after)
	}
}
