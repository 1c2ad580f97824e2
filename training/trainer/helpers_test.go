package trainer

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/callback"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/rundir"
	"github.com/ortrain/ortrain/training/setup"
)

// blobs is an in-memory dataset: three Gaussian blobs in 4-D, sample i
// fixed by i alone. Samples listed in nan get a NaN feature.
type blobs struct {
	x   []float32
	y   []int64
	nan map[int]bool
}

func newBlobs(n int, seed uint64, nan ...int) *blobs {
	r := rand.New(rand.NewPCG(seed, 7))
	centers := [][]float64{{2, 0, 0, 1}, {-1, 2, 0, -1}, {0, -2, 1.5, 0}}
	b := &blobs{x: make([]float32, 4*n), y: make([]int64, n), nan: map[int]bool{}}
	for i := range n {
		c := r.IntN(3)
		b.y[i] = int64(c)
		for k := range 4 {
			b.x[4*i+k] = float32(centers[c][k] + 0.7*r.NormFloat64())
		}
	}
	for _, i := range nan {
		b.nan[i] = true
	}
	return b
}

func (b *blobs) Len() int { return len(b.y) }

func (b *blobs) Spec() []data.TensorSpec {
	return []data.TensorSpec{{Name: "x", DType: data.Float32, Shape: []int{4}}, {Name: "label", DType: data.Int64}}
}

func (b *blobs) Load(i int, _ *rand.Rand, dst data.Sample) error {
	copy(dst[0].F32, b.x[4*i:4*i+4])
	if b.nan[i] {
		dst[0].F32[1] = float32(math.NaN())
	}
	dst[1].I64[0] = b.y[i]
	return nil
}

// mlp is x[batch,4] -> Gemm(16) -> Relu -> MatMul(16x3) + bias: logits.
func mlp(r *rand.Rand) *graph.Graph {
	randn := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
		}
		return v
	}
	g := graph.New("mlp", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
	g.Dims["x"] = []string{"batch", ""}
	g.AddInitializer(graph.Float32s("fc1.weight", []int64{16, 4}, randn(64, 0.5)))
	g.AddInitializer(graph.Float32s("fc1.bias", []int64{16}, make([]float32, 16)))
	g.AddInitializer(graph.Float32s("fc2.weight", []int64{16, 3}, randn(48, 0.25)))
	g.AddInitializer(graph.Float32s("fc2.bias", []int64{3}, make([]float32, 3)))
	b := graph.NewBuilder(g, "")
	h := b.Relu(b.Op("Gemm", []string{"x", "fc1.weight", "fc1.bias"}, graph.AInt("transB", 1)))
	b.OpInto("logits", "Add", []string{b.MatMul(h, "fc2.weight"), "fc2.bias"})
	g.Outputs = []string{"logits"}
	return g
}

var (
	artOnce sync.Once
	artDir  string
	artErr  error
)

// mlpArtifacts builds the MLP's artifacts (AdamW, cross-entropy) once per
// test binary.
func mlpArtifacts(t testing.TB) string {
	orttest.Init(t)
	artOnce.Do(func() {
		dir, err := mkdirTemp()
		if err != nil {
			artErr = err
			return
		}
		artDir = filepath.Join(dir, "mlp")
		_, artErr = artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(1, 2))), Out: artDir, Loss: "cross_entropy"})
	})
	if artErr != nil {
		t.Fatal(artErr)
	}
	return artDir
}

// baseTOML is the run the loop tests share: accumulation, clipping, warmup
// and cosine decay, shuffling with two workers, validation and checkpoints.
const baseTOML = `
name = "mlp"
seed = 3
[model]
artifacts = "ART"
[data]
kind = "synthetic"
batch_size = 8
num_workers = 2
[trainer]
device = "cpu"
max_steps = 24
accumulate_grad_batches = 2
gradient_clip_val = 0.5
val_check_interval = 5
log_every_n_steps = 4
checkpoint_every_n_steps = 4
save_top_k = 2
monitor = "val/loss"
mode = "min"
[optimizer]
lr = 0.02
[scheduler]
name = "cosine"
warmup_steps = 3
min_lr = 0.001
`

// testConfig resolves baseTOML with the artifacts and overrides.
func testConfig(t testing.TB, art string, set ...string) *config.Config {
	c, err := config.Parse([]byte(baseTOML), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Override(append([]string{"model.artifacts=" + `"` + art + `"`}, set...)...); err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	return c
}

// recorder keeps every step's result and can cancel the run at a step.
type recorder struct {
	results []callback.StepResult
	stopAt  int64
	cancel  context.CancelFunc
	val     []float64
	// valMetrics are every validation's metrics.
	valMetrics []map[string]float64
	onStep     func(*callback.State)
	onStart    func(*callback.State)
	trainEnd   bool
	stopReason string // the State's at OnTrainEnd
}

func (r *recorder) OnTrainStart(s *callback.State) error {
	if r.onStart != nil {
		r.onStart(s)
	}
	return nil
}
func (r *recorder) OnStepEnd(s *callback.State, res callback.StepResult) error {
	res.Terms = slices.Clone(res.Terms) // the loop reuses the slice
	r.results = append(r.results, res)
	if r.onStep != nil {
		r.onStep(s)
	}
	if r.stopAt > 0 && s.Step == r.stopAt {
		r.cancel()
	}
	return nil
}
func (r *recorder) OnValidationEnd(_ *callback.State, m map[string]float64) error {
	r.val = append(r.val, m["val/loss"])
	r.valMetrics = append(r.valMetrics, m)
	return nil
}
func (r *recorder) OnTrainEnd(s *callback.State) error {
	r.trainEnd, r.stopReason = true, s.StopReason
	return nil
}

// build makes a trainer for c in run directory dir (a new version when
// dir is ""), resuming from resume; the blobs datasets unless ds gives the
// training set (and then the validation set). Cleanup closes both.
func build(t testing.TB, c *config.Config, dir, resume string, cbs []callback.Callback, ds ...data.Dataset) (*Trainer, *rundir.Dir) {
	t.Helper()
	var rd *rundir.Dir
	var err error
	if dir == "" {
		rd, err = rundir.New(filepath.Join(t.TempDir(), "outputs"), c.Name)
	} else {
		rd, err = rundir.Resume(dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	train, val := data.Dataset(newBlobs(96, 1)), data.Dataset(newBlobs(40, 2))
	if len(ds) > 0 {
		train = ds[0]
	}
	if len(ds) > 1 {
		val = ds[1]
	}
	opts, err := c.SessionOptions(false)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(Options{Config: c, Artifacts: c.Model.Artifacts, Session: opts, Train: train, Val: val, Dir: rd, Resume: resume, Callbacks: cbs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, rd
}

// run trains c to the end (or rec's stop step) and returns the run
// directory and the loop's error.
func run(t testing.TB, c *config.Config, dir, resume string, rec *recorder, ds ...data.Dataset) (string, error) {
	t.Helper()
	tr, rd := build(t, c, dir, resume, []callback.Callback{rec}, ds...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec.cancel = cancel
	err := tr.Run(ctx)
	tr.Close()
	rd.Close()
	return rd.Path, err
}

// runConfig trains a resolved configuration to its end in a new run
// directory, with artifacts built from its model and the datasets its data
// section names (or ds: the training set, then the validation set), and
// returns the loss of each step.
func runConfig(t *testing.T, c *config.Config, ds ...data.Dataset) []float64 {
	t.Helper()
	art, m, err := setup.Artifacts(c, t.TempDir(), ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var train, val data.Dataset
	if len(ds) > 0 {
		train, val = ds[0], ds[1]
	} else if train, val, err = setup.Datasets(c, m); err != nil {
		t.Fatal(err)
	}
	opts, err := c.SessionOptions(false)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := rundir.New(c.OutputDir, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rec := &recorder{}
	tr, err := New(Options{Config: c, Artifacts: art, Session: opts, Train: train, Val: val, Dir: rd, Callbacks: []callback.Callback{rec}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for _, r := range rec.results {
		losses = append(losses, r.Loss)
	}
	return losses
}
