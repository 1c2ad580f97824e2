package trainer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/images"
	"github.com/ortrain/ortrain/training/data/tokens"
	"github.com/ortrain/ortrain/training/data/volumes"
	"github.com/ortrain/ortrain/training/optim"
)

// Sizes of the synthetic training and validation sets.
const (
	SyntheticTrainLen = 1024
	SyntheticValLen   = 256
)

// Datasets makes the training and validation datasets that [data] of c
// describes for the model of manifest m; val is nil without validation
// data. Missing paths are errors naming the key and the path.
func Datasets(c *config.Config, m *artifacts.Manifest) (train, val data.Dataset, err error) {
	d := c.Data
	for _, p := range []struct{ key, path string }{{"data.train", d.Train}, {"data.val", d.Val}} {
		if p.path == "" || d.Kind == "synthetic" {
			continue
		}
		if _, err := os.Stat(p.path); err != nil {
			return nil, nil, &config.Error{Key: p.key, Msg: fmt.Sprintf("%s: %v", p.path, err)}
		}
	}
	switch d.Kind {
	case "synthetic":
		if train, err = NewSynthetic(m, SyntheticTrainLen, uint64(c.Seed)); err != nil {
			return nil, nil, err
		}
		val, err = NewSynthetic(m, SyntheticValLen, uint64(c.Seed)+1<<32)
		return train, val, err
	case "images":
		layout := images.NCHW
		if d.Images.Layout == "NHWC" {
			layout = images.NHWC
		}
		open := func(root string, isTrain bool) (data.Dataset, error) {
			items, _, err := images.Folders(root)
			if err != nil {
				return nil, err
			}
			return images.New(items, images.Config{Train: isTrain, Size: d.Images.Size, Layout: layout})
		}
		if train, err = open(d.Train, true); err == nil && d.Val != "" {
			val, err = open(d.Val, false)
		}
		return train, val, err
	case "volumes":
		v := d.Volumes
		cfg := volumes.Config{TrainSplit: v.TrainSplit, SplitSeed: uint64(c.Seed), MaxPatients: v.MaxPatients,
			PatchSize: xyz(v.PatchSize), Stride: xyz(v.Stride), CacheBytes: int64(d.MemoryLimit) / 2}
		if cfg.CacheBytes == 0 {
			cfg.CacheBytes = 4 << 30
		}
		if len(v.Window) == 2 {
			cfg.Window = volumes.Window{Low: float32(v.Window[0]), High: float32(v.Window[1])}
		}
		if cfg.Files, err = volumes.Find(d.Train); err != nil {
			return nil, nil, err
		}
		if train, err = volumes.New(cfg); err != nil {
			return nil, nil, err
		}
		switch {
		case d.Val != "":
			cfg.TrainSplit, cfg.MaxPatients = 1, 0
			if cfg.Files, err = volumes.Find(d.Val); err == nil {
				val, err = volumes.New(cfg)
			}
		case v.TrainSplit < 1:
			cfg.Val = true
			val, err = volumes.New(cfg)
		}
		return train, val, err
	case "tokens":
		if d.Tokens.Segments {
			return nil, nil, &config.Error{Key: "data.tokens.segments", Msg: "HDP segments need the recipe's segment lengths; ortrain train lays out BD3-LM blocks only"}
		}
		tok, err := tokens.GPT2()
		if err != nil {
			return nil, nil, err
		}
		noise := false
		for _, t := range m.Data {
			noise = noise || t.Name == "noisy_ids"
		}
		cfg := tokens.Config{SeqLen: d.Tokens.SeqLen, BlockSize: d.Tokens.BlockSize, Noise: noise}
		open := func(path string) (data.Dataset, error) {
			ex, _, err := tokens.ReadGSM8K(path, false)
			if err != nil {
				return nil, err
			}
			return tokens.New(ex, tok, cfg)
		}
		if train, err = open(d.Train); err == nil && d.Val != "" {
			val, err = open(d.Val)
		}
		return train, val, err
	}
	return nil, nil, &config.Error{Key: "data.kind", Msg: fmt.Sprintf("%q has no dataset", d.Kind)}
}

// Synthetic is a dataset made up to fit a model's data inputs, for smoke
// tests and benchmarks of the loop: float inputs are standard normal, and
// targets depend on them so the task is learnable — an int64 target is 1
// where the sample's first float input sums positive and 0 elsewhere (a
// valid class for any classifier), a float target is that sum's tanh.
// Sample i depends on (seed, i) alone.
type Synthetic struct {
	n    int
	seed uint64
	spec []data.TensorSpec
}

// NewSynthetic makes n samples for the data inputs of m, which must have
// fixed sizes apart from the batch dimension.
func NewSynthetic(m *artifacts.Manifest, n int, seed uint64) (*Synthetic, error) {
	s := &Synthetic{n: n, seed: seed}
	for _, t := range m.Data {
		var dt data.DType
		switch t.DType {
		case "float32":
			dt = data.Float32
		case "int64":
			dt = data.Int64
		case "uint8", "bool":
			dt = data.Uint8
		default:
			return nil, fmt.Errorf("data.kind = \"synthetic\": input %s is %s, which it cannot make", t.Name, t.DType)
		}
		var shape []int
		for i, d := range t.Shape {
			if i == 0 {
				continue // the batch
			}
			if d < 1 {
				return nil, fmt.Errorf("data.kind = \"synthetic\": input %s has shape %v; it needs fixed sizes after the batch", t.Name, t.Shape)
			}
			shape = append(shape, int(d))
		}
		s.spec = append(s.spec, data.TensorSpec{Name: t.Name, DType: dt, Shape: shape})
	}
	return s, nil
}

// Len is the number of samples.
func (s *Synthetic) Len() int { return s.n }

// Spec names the model's data inputs.
func (s *Synthetic) Spec() []data.TensorSpec { return s.spec }

// Load writes sample i.
func (s *Synthetic) Load(i int, _ *rand.Rand, dst data.Sample) error {
	r := rand.New(rand.NewPCG(s.seed, uint64(i)))
	sum, seen := 0.0, false
	for k := range dst {
		if t := &dst[k]; t.DType == data.Float32 && t.Name != "target" {
			for j := range t.F32 {
				t.F32[j] = float32(r.NormFloat64())
				if !seen {
					sum += float64(t.F32[j])
				}
			}
			seen = true
		}
	}
	for k := range dst {
		t := &dst[k]
		switch {
		case t.DType == data.Float32 && t.Name == "target":
			for j := range t.F32 {
				t.F32[j] = float32(math.Tanh(sum))
			}
		case t.DType == data.Int64:
			for j := range t.I64 {
				t.I64[j] = 0
				if sum > 0 {
					t.I64[j] = 1
				}
			}
		case t.DType == data.Uint8:
			for j := range t.U8 {
				t.U8[j] = 1
			}
		}
	}
	return nil
}

// Artifacts returns the artifact directory to train for c: model.artifacts as
// given (checked to load), or artifacts built into runDir/artifacts from a
// forward model (model.onnx, with the config's loss) or from a built-in
// recipe (model.recipe with model.params), with the config's trainable and
// frozen globs and optimizer. A resumed run finds them there already.
func Artifacts(c *config.Config, runDir string) (string, *artifacts.Manifest, error) {
	mc := c.Model
	if mc.Artifacts != "" {
		m, err := artifacts.Load(mc.Artifacts)
		if err != nil {
			return "", nil, &config.Error{Key: "model.artifacts", Msg: fmt.Sprintf("%s: %v", mc.Artifacts, err)}
		}
		return mc.Artifacts, m, nil
	}
	if mc.ONNX == "" && mc.Recipe == "" {
		return "", nil, &config.Error{Key: "model", Msg: "name prebuilt artifacts (model.artifacts), a forward model (model.onnx) or a built-in recipe (model.recipe)"}
	}
	if mc.ONNX != "" {
		if _, err := os.Stat(mc.ONNX); err != nil {
			return "", nil, &config.Error{Key: "model.onnx", Msg: err.Error()}
		}
	}
	out := filepath.Join(runDir, "artifacts")
	if m, err := artifacts.Load(out); err == nil {
		return out, m, nil // built by the run being resumed
	}
	o := c.Optimizer
	// The resolved config holds every value: a zero weight decay is zero.
	oc := optim.Config{Kind: o.Name, LR: o.LR, WeightDecay: o.WeightDecay, Eps: o.Eps, Momentum: o.Momentum, Nesterov: o.Nesterov, Exact: true}
	if len(o.Betas) == 2 {
		oc.Beta1, oc.Beta2 = o.Betas[0], o.Betas[1]
	}
	opts := artifacts.Options{Model: mc.ONNX, Out: out, Trainable: mc.Trainable, Frozen: mc.Frozen, Optimizer: oc}
	source := mc.ONNX
	if mc.ONNX == "" {
		rm, err := models.Build(mc.Recipe, mc.Params)
		if err != nil {
			return "", nil, &config.Error{Key: "model.params", Msg: err.Error()}
		}
		opts.Graph, opts.Loss, opts.LabelSmoothing = rm.Graph, rm.Loss, rm.LabelSmoothing
		source = "recipe " + mc.Recipe
	} else {
		switch opts.Loss = mc.Loss; opts.Loss {
		case "mse", "l1", "cross_entropy", "bce_with_logits":
		default:
			opts.Loss = "output:" + opts.Loss
		}
	}
	m, err := artifacts.Build(opts)
	if err != nil {
		return "", nil, fmt.Errorf("building artifacts from %s: %w", source, err)
	}
	return out, m, nil
}

// xyz turns the config's [D, H, W] (tensor order) into the volumes
// package's NIfTI order [x, y, z].
func xyz(dhw []int) [3]int {
	if len(dhw) != 3 {
		return [3]int{}
	}
	return [3]int{dhw[2], dhw[1], dhw[0]}
}
