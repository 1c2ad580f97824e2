package main

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/data/npy"
	"github.com/ortrain/ortrain/training/graph"
)

// mlpONNX writes model.onnx of an MLP, x [batch, in] -> Gemm(16) -> Relu
// -> Gemm(out): what a user exports from PyTorch and trains with a
// built-in loss.
func mlpONNX(t *testing.T, path string, in, out int) {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	randn := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
		}
		return v
	}
	g := graph.New("mlp", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, int64(in)}})
	g.Dims["x"] = []string{"batch", ""}
	g.AddInitializer(graph.Float32s("fc1.weight", []int64{16, int64(in)}, randn(16*in, 1/math.Sqrt(float64(in)))))
	g.AddInitializer(graph.Float32s("fc1.bias", []int64{16}, make([]float32, 16)))
	g.AddInitializer(graph.Float32s("fc2.weight", []int64{int64(out), 16}, randn(16*out, 0.25)))
	g.AddInitializer(graph.Float32s("fc2.bias", []int64{int64(out)}, make([]float32, out)))
	b := graph.NewBuilder(g, "")
	h := b.Relu(b.Op("Gemm", []string{"x", "fc1.weight", "fc1.bias"}, graph.AInt("transB", 1)))
	b.OpInto("pred", "Gemm", []string{h, "fc2.weight", "fc2.bias"}, graph.AInt("transB", 1))
	g.Outputs = []string{"pred"}
	if err := g.Save(path, graph.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
}

// npyBytes is an .npy file of vals as descr ("<f4", "<f8", "<i8").
func npyBytes(descr string, shape []int, vals []float64) []byte {
	var raw []byte
	for _, v := range vals {
		switch descr {
		case "<f4":
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(v)))
		case "<f8":
			raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(v))
		case "<i8":
			raw = binary.LittleEndian.AppendUint64(raw, uint64(int64(v)))
		default:
			panic(descr)
		}
	}
	return npy.Encode(descr, false, shape, raw)
}

// writeNPY writes an .npy file in dir, made if missing.
func writeNPY(t *testing.T, dir, name, descr string, shape []int, vals []float64) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, name), npyBytes(descr, shape, vals), 0o644); err != nil {
		t.Fatal(err)
	}
}

// trainLosses are a run's train/loss values in step order, from
// metrics.csv.
func trainLosses(t *testing.T, version string) []float64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(version, "metrics.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Split(line, ","); len(f) >= 3 && f[1] == "train/loss" {
			var v float64
			fmt.Sscan(f[2], &v)
			out = append(out, v)
		}
	}
	return out
}

const arraysTOML = `name = "NAME"
output_dir = "OUT"
[model]
onnx = "MODEL"
loss = "LOSS"
[data]
kind = "arrays"
train = "TRAIN"
batch_size = 16
num_workers = 1
[trainer]
device = "cpu"
precision = "32"
max_steps = 60
log_every_n_steps = 5
checkpoint_every_n_steps = 0
monitor = ""
[optimizer]
lr = 0.01
weight_decay = 0
[scheduler]
name = "constant"
warmup_steps = 0
`

// arraysConfig writes a run config training model on the arrays at
// train, with extra TOML appended.
func arraysConfig(t *testing.T, root, name, model, loss, train, extra string) string {
	t.Helper()
	body := strings.NewReplacer("NAME", name, "OUT", filepath.Join(root, "outputs"), "MODEL", model, "LOSS", loss, "TRAIN", train).Replace(arraysTOML) + extra
	path := filepath.Join(root, name+".toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestArraysRegressor: a user's model.onnx (an MLP regressor with the
// built-in MSE) trains on their own X and y: x.npy in float64 (converted
// to the float32 the model takes) and y.npy of shape (N,) feeding the
// loss's target [batch, 1] through [data.feeds]. The loss falls; plan
// counts the samples.
func TestArraysRegressor(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	model := filepath.Join(root, "model.onnx")
	mlpONNX(t, model, 8, 1)
	const n = 256
	r := rand.New(rand.NewPCG(1, 2))
	w := []float64{0.5, -1, 0.25, 2, 0, -0.5, 1, 0.75}
	x, y := make([]float64, n*8), make([]float64, n)
	for i := range n {
		for k := range 8 {
			x[8*i+k] = r.NormFloat64()
			y[i] += w[k] * x[8*i+k]
		}
		y[i] += 0.05 * r.NormFloat64()
	}
	train := filepath.Join(root, "tab")
	writeNPY(t, train, "x.npy", "<f8", []int{n, 8}, x)
	writeNPY(t, train, "y.npy", "<f4", []int{n}, y)
	cfg := arraysConfig(t, root, "reg", model, "mse", train, "[data.feeds]\ntarget = \"y\"\n")

	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "plan", "--config", cfg}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "256 train, 0 val") {
		t.Fatalf("plan: exit %d: %s\n%s", code, errOut.String(), out.String())
	}
	out.Reset()
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	losses := trainLosses(t, filepath.Join(root, "outputs", "reg", "version_0"))
	if len(losses) < 10 {
		t.Fatalf("train/loss logged %d times: %v", len(losses), losses)
	}
	first, last := losses[0], losses[len(losses)-1]
	t.Logf("train/loss %.3f -> %.3f", first, last)
	if !(last < first/3) {
		t.Errorf("train/loss %.4g -> %.4g: want it to fall at least threefold (%v)", first, last, losses)
	}
}

// TestArraysClassifier: int64 labels from label.npy feed the
// cross-entropy's class indices (a loader's labels feed a loss's target
// without a feed); validation on an .npz archive (np.savez's layout)
// reports val/top1, which learns the blobs.
func TestArraysClassifier(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	model := filepath.Join(root, "model.onnx")
	mlpONNX(t, model, 4, 3)
	blobs := func(n int, seed uint64) (x, y []float64) {
		r := rand.New(rand.NewPCG(seed, 7))
		centers := [][]float64{{2, 0, 0, 1}, {-1, 2, 0, -1}, {0, -2, 1.5, 0}}
		for range n {
			c := r.IntN(3)
			y = append(y, float64(c))
			for k := range 4 {
				x = append(x, centers[c][k]+0.5*r.NormFloat64())
			}
		}
		return x, y
	}
	train := filepath.Join(root, "train")
	x, y := blobs(192, 1)
	writeNPY(t, train, "x.npy", "<f4", []int{192, 4}, x)
	writeNPY(t, train, "label.npy", "<i8", []int{192}, y)
	val := filepath.Join(root, "val.npz")
	vx, vy := blobs(48, 2)
	f, err := os.Create(val)
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	for _, m := range []struct {
		name string
		body []byte
	}{{"x.npy", npyBytes("<f4", []int{48, 4}, vx)}, {"label.npy", npyBytes("<i8", []int{48}, vy)}} {
		zw, _ := z.CreateHeader(&zip.FileHeader{Name: m.name, Method: zip.Store})
		zw.Write(m.body)
	}
	z.Close()
	f.Close()
	cfg := arraysConfig(t, root, "cls", model, "cross_entropy", train, "")
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg, "--set", `data.val="` + val + `"`, "--set", "trainer.val_check_interval=30",
		"--set", `trainer.monitor="val/top1"`, "--set", `trainer.mode="max"`}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	m := valMetrics(t, filepath.Join(root, "outputs", "cls", "version_0"))
	t.Logf("validation: %v", m)
	if top1, ok := m["val/top1"]; !ok || top1 < 0.9 {
		t.Errorf("val/top1 = %v (%v): want the blobs learnt, ≥ 0.9", top1, ok)
	}
}

// TestArraysRefusals: arrays that cannot feed the model stop `ortrain
// train` with exit 2 and a message naming the file by its full path and
// what is wrong, before a run directory exists; a NaN in the data stops
// the run when its sample loads, naming the file and the sample.
func TestArraysRefusals(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	model := filepath.Join(root, "model.onnx")
	mlpONNX(t, model, 4, 3)
	x := make([]float64, 32*4)
	labels := make([]float64, 32)
	for i := range x {
		x[i] = float64(i%7) - 3
	}
	for i := range labels {
		labels[i] = float64(i % 3)
	}
	dir := func(name string) string { return filepath.Join(root, name) }
	writeNPY(t, dir("unequal"), "x.npy", "<f4", []int{32, 4}, x)
	writeNPY(t, dir("unequal"), "label.npy", "<i8", []int{30}, labels[:30])
	writeNPY(t, dir("scalar"), "x.npy", "<f4", []int{32, 4}, x)
	writeNPY(t, dir("scalar"), "label.npy", "<i8", []int{32}, labels)
	writeNPY(t, dir("scalar"), "mean.npy", "<f4", nil, []float64{0.5})
	writeNPY(t, dir("extra"), "x.npy", "<f4", []int{32, 4}, x)
	writeNPY(t, dir("extra"), "label.npy", "<i8", []int{32}, labels)
	writeNPY(t, dir("extra"), "weight.npy", "<f4", []int{32}, labels)
	writeNPY(t, dir("nolabel"), "x.npy", "<f4", []int{32, 4}, x)
	writeNPY(t, dir("nolabel"), "y.npy", "<i8", []int{32}, labels)
	writeNPY(t, dir("floatlabel"), "x.npy", "<f4", []int{32, 4}, x)
	writeNPY(t, dir("floatlabel"), "label.npy", "<f8", []int{32}, labels)
	writeNPY(t, dir("wide"), "x.npy", "<f4", []int{32, 5}, append(x, x[:32]...))
	writeNPY(t, dir("wide"), "label.npy", "<i8", []int{32}, labels)
	nan := append([]float64(nil), x...)
	nan[4*20+2] = math.NaN()
	writeNPY(t, dir("nan"), "x.npy", "<f8", []int{32, 4}, nan)
	writeNPY(t, dir("nan"), "label.npy", "<i8", []int{32}, labels)
	os.MkdirAll(dir("empty"), 0o755)
	os.WriteFile(filepath.Join(dir("empty"), "readme.txt"), []byte("x"), 0o644)
	os.MkdirAll(dir("nothing"), 0o755)

	for _, c := range []struct {
		name, train string
		say         []string
	}{
		{"a missing folder", dir("absent"), []string{"data.train: " + dir("absent") + ": no such file or directory"}},
		{"no .npy files", dir("nothing"), []string{"data.train: " + dir("nothing") + ": holds no .npy arrays"}},
		{"another file", dir("empty"), []string{filepath.Join(dir("empty"), "readme.txt") + ": is not a .npy array"}},
		{"unequal first axes", dir("unequal"), []string{filepath.Join(dir("unequal"), "label.npy") + " has 30 samples (shape [30])", filepath.Join(dir("unequal"), "x.npy") + " has 32 (shape [32 4])"}},
		{"a 0-d array", dir("scalar"), []string{filepath.Join(dir("scalar"), "mean.npy") + ": is a 0-d array"}},
		{"a file for no input", dir("extra"), []string{filepath.Join(dir("extra"), "weight.npy") + `: feeds none of the model's inputs (x, target)`}},
		{"an input without a file", dir("nolabel"), []string{dir("nolabel") + `: no array feeds the model's input "target" (a built-in loss's target) (the arrays: x.npy, y.npy)`}},
		{"float labels", dir("floatlabel"), []string{filepath.Join(dir("floatlabel"), "label.npy") + `: holds float64 values, but the model's input "target" takes int64 (class indices)`}},
		{"other sizes", dir("wide"), []string{filepath.Join(dir("wide"), "x.npy") + `: holds samples of [5] (the array is [32 5], first axis the samples), but the model's input "x" takes [4] per sample`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := arraysConfig(t, root, "bad", model, "cross_entropy", c.train, "")
			var out, errOut bytes.Buffer
			code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut)
			if code != 2 {
				t.Fatalf("exit %d, want 2: %s", code, errOut.String())
			}
			for _, s := range c.say {
				if !strings.Contains(errOut.String(), s) {
					t.Errorf("stderr %q\nwant it to say %q", errOut.String(), s)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "outputs", "bad")); !os.IsNotExist(err) {
				t.Errorf("a refused run left a run directory (%v)", err)
			}
		})
	}

	t.Run("NaN", func(t *testing.T) {
		cfg := arraysConfig(t, root, "nan", model, "cross_entropy", dir("nan"), "")
		var out, errOut bytes.Buffer
		code := run([]string{"ortrain", "train", "--config", cfg, "--set", "data.shuffle=false", "--set", "data.batch_size=4"}, &out, &errOut)
		want := filepath.Join(dir("nan"), "x.npy") + ": sample 20: 1 of its 4 values are not finite as float32 (1 NaN), the first at [20, 2]"
		if code != 2 || !strings.Contains(errOut.String(), want) {
			t.Errorf("exit %d, stderr %q; want 2 saying %q", code, errOut.String(), want)
		}
	})
}
