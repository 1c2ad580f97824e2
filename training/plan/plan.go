// Package plan works out what a run configuration would do, without training
// and without a GPU: where the run goes, the model's size and the device
// memory its training state takes, the batch and learning-rate arithmetic,
// the run length in steps, the validation and checkpoint cadence and the
// loader's host-memory plan. `ortrain plan` prints it.
//
// A plan is meant to be made before the data is in place, so a missing
// data.train is not an error here (Resolve tolerates it): the parts that
// need the dataset say why they are unknown instead. Everything else is
// checked as `ortrain train` checks it, and the numbers come from the same
// functions the trainer uses (config.PeakLR, schedule.FromConfig,
// setup.Datasets, data.New), so the plan cannot drift from the run.
package plan

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/diffusionlm"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/loss"
	"github.com/ortrain/ortrain/training/schedule"
	"github.com/ortrain/ortrain/training/setup"
)

// Plan is what a run would do. Counts that need the dataset are 0 when it
// could not be opened; Data.Unopened then says why.
type Plan struct {
	Name string `json:"name"`
	// RunDir is the version directory a new run would create (the next
	// free version_N under output_dir/name); nothing is created.
	RunDir    string `json:"run_dir"`
	Device    string `json:"device"`
	Precision string `json:"precision"`
	// Arithmetic says what runs in which type under Precision.
	Arithmetic string `json:"arithmetic"`
	CUDA       *CUDA  `json:"cuda,omitempty"`
	Model      Model  `json:"model"`
	Data       Data   `json:"data"`
	Batch      Batch  `json:"batch"`
	LR         LR     `json:"lr"`
	Steps      Steps  `json:"steps"`
	Loader     Loader `json:"loader"`
	// Activations is filled by MeasureActivations (plan --memory).
	Activations *Activations `json:"activations,omitempty"`
	Notes       []string     `json:"notes,omitempty"`
	// Warnings are what would make `ortrain train` fail or misbehave with
	// this configuration and data (a loader plan over data.memory_limit...).
	Warnings []string `json:"warnings,omitempty"`
	// Refusals are what train would refuse; plan exits 2 on any.
	Refusals []string `json:"refusals,omitempty"`
}

// CUDA is the CUDA execution provider's settings ([runtime]), present
// unless the run is on the CPU.
type CUDA struct {
	UseTF32             bool   `json:"use_tf32"`
	ConvAlgoSearch      string `json:"cudnn_conv_algo_search"`
	GPUMemLimit         int64  `json:"gpu_mem_limit"`
	ArenaExtendStrategy string `json:"arena_extend_strategy"`
	EnableCUDAGraph     bool   `json:"enable_cuda_graph"`
	PreferNHWC          bool   `json:"prefer_nhwc"`
	AllowCPUFallback    bool   `json:"allow_cpu_fallback"`
}

// Model is the model and the device memory of its training state.
type Model struct {
	// Source is "recipe NAME", "onnx FILE" or "artifacts DIR".
	Source string `json:"source"`
	// Params is the number of trained scalars.
	Params int64 `json:"params"`
	// Optimizer is optimizer.name, with momentum for SGD.
	Optimizer string `json:"optimizer"`
	// StateCopies is how many parameter-sized fp32 tensors the trainer
	// keeps on the device: each state tensor (params, gradient
	// accumulators, optimizer moments) twice, because outputs are written
	// into a spare buffer and swapped instead of copied. AdamW 8, SGD with
	// momentum 6, plain SGD 4; one more when micro-batches are accumulated
	// (the trainer's scratch for a later micro-batch's gradients).
	StateCopies int `json:"state_copies"`
	// StateBytes is StateCopies × 4 bytes × Params. Activations and
	// buffers (BatchNorm statistics) are not included.
	StateBytes int64 `json:"state_bytes"`
	// InitWeights is model.init_weights, the weights a new run starts
	// from (strict or not); empty when it starts from the model's own.
	InitWeights string `json:"init_weights,omitempty"`
}

// Data is the dataset and whether it could be opened.
type Data struct {
	Kind  string `json:"kind"`
	Train Path   `json:"train"`
	Val   Path   `json:"val"`
	// Validation says where validation data comes from, or that there is
	// none.
	Validation   string `json:"validation"`
	TrainSamples int    `json:"train_samples,omitempty"`
	ValSamples   int    `json:"val_samples,omitempty"`
	// ValDraws is the noise draws per validation sequence (diffusion LM).
	ValDraws int `json:"val_draws,omitempty"`
	// Unopened says why the dataset was not opened; "" when it was.
	Unopened string `json:"unopened,omitempty"`
}

// Path is a data path of the configuration and whether it exists.
type Path struct {
	Key    string `json:"key"`
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
}

// Batch is the batch arithmetic.
type Batch struct {
	PerDevice  int `json:"per_device"`
	Accumulate int `json:"accumulate_grad_batches"`
	// WorldSize is the number of processes, one device each
	// (trainer.devices × trainer.num_nodes).
	WorldSize int `json:"world_size"`
	Effective int `json:"effective"`
	// Collective is how a data-parallel run sums its gradients; empty for
	// one process.
	Collective string `json:"collective,omitempty"`
}

// LR is the learning-rate arithmetic and the schedule.
type LR struct {
	Base      float64 `json:"base"`
	Scaling   string  `json:"scaling"`
	BaseBatch int     `json:"base_batch_size"`
	Peak      float64 `json:"peak"`
	Schedule  string  `json:"schedule"`
	MinLR     float64 `json:"min_lr"`
	// Warmup is the warmup in optimizer steps; with warmup_ratio it is
	// known only with the total steps (WarmupRatio says the ratio).
	Warmup      int64   `json:"warmup_steps"`
	WarmupRatio float64 `json:"warmup_ratio,omitempty"`
	// Points are the LR at a few steps: start, end of warmup, middle,
	// last; those that need unknown total steps are left out.
	Points []Point `json:"points"`
}

// Point is the learning rate of the optimizer step after Step steps.
type Point struct {
	Step  int64   `json:"step"`
	Label string  `json:"label"`
	LR    float64 `json:"lr"`
}

// Steps are the run length and cadences in optimizer steps; 0 where
// unknown.
type Steps struct {
	PerEpoch  int64 `json:"per_epoch"`
	Total     int64 `json:"total"`
	MaxEpochs int   `json:"max_epochs"`
	MaxSteps  int64 `json:"max_steps"`
	// ValEvery is the optimizer steps between validations; 0 without
	// validation or when it is a fraction of an epoch of unknown length.
	ValEvery int64 `json:"val_every"`
	// ValInterval is trainer.val_check_interval as written.
	ValInterval     string `json:"val_check_interval"`
	CheckpointEvery int64  `json:"checkpoint_every"`
	SaveTopK        int    `json:"save_top_k"`
	Monitor         string `json:"monitor,omitempty"`
	Mode            string `json:"mode,omitempty"`
}

// Loader is the training loader's host-memory plan, as data.New makes it:
// Workers × (1 + Prefetch) + 1 batch buffers (one being filled per worker,
// Prefetch waiting per worker, one held by the trainer) plus the dataset's
// cache.
type Loader struct {
	Workers int `json:"workers"`
	// Prefetch is data.prefetch, batches ahead per worker.
	Prefetch   int   `json:"prefetch"`
	Buffers    int   `json:"buffers"`
	BatchBytes int64 `json:"batch_bytes"`
	CacheBytes int64 `json:"cache_bytes"`
	TotalBytes int64 `json:"total_bytes"`
	// Limit is data.memory_limit, or the machine's memory when that is 0
	// (LimitIsRAM).
	Limit      int64 `json:"limit"`
	LimitIsRAM bool  `json:"limit_is_ram,omitempty"`
	// Estimated is true when the dataset could not be opened and the sizes
	// come from the configuration (data shapes and the cache rule).
	Estimated bool `json:"estimated"`
	// Known is false when not even an estimate could be made.
	Known bool `json:"known"`
}

// Resolve resolves c as config.Resolve does, except that a data.train
// left empty is not an error: presets leave it to the user, and a plan is
// made before the data is there. It reports whether data.train is missing.
func Resolve(c *config.Config) (trainMissing bool, err error) {
	err = c.Resolve()
	if err == nil || c.Data.Train != "" || c.Data.Kind == config.KindSynthetic {
		return false, err
	}
	var rest []error
	for _, e := range unjoin(err) {
		var ce *config.Error
		if errors.As(e, &ce) && ce.Key == "data.train" {
			trainMissing = true
			continue
		}
		rest = append(rest, e)
	}
	return trainMissing, errors.Join(rest...)
}

// unjoin lists the errors errors.Join put together.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Make plans the run of c, which Resolve (of this package) has accepted.
// Errors are those `ortrain train` would also stop at before training
// (a recipe's bad parameters, a model file that does not load, a schedule
// the run length cannot hold); a missing or unreadable dataset is not one.
func Make(c *config.Config) (*Plan, error) {
	p := &Plan{Name: c.Name, RunDir: nextVersion(c.OutputDir, c.Name), Device: c.Trainer.Device, Precision: string(c.Trainer.Precision)}
	if c.Trainer.Device == "auto" {
		p.Device = "auto (cuda:0 when ONNX Runtime has CUDA, else cpu)"
	}
	if c.Trainer.Device != "cpu" {
		r := c.Runtime
		p.CUDA = &CUDA{UseTF32: r.UseTF32, ConvAlgoSearch: r.CudnnConvAlgoSearch, GPUMemLimit: int64(r.GPUMemLimit),
			ArenaExtendStrategy: r.ArenaExtendStrategy, EnableCUDAGraph: r.EnableCUDAGraph, PreferNHWC: r.PreferNHWC, AllowCPUFallback: r.AllowCPUFallback}
	}
	m, err := p.model(c)
	if err != nil {
		return nil, err
	}
	p.batch(c)
	p.data(c, m)
	if err := p.steps(c); err != nil {
		return nil, err
	}
	return p, nil
}

// model fills Model and returns a manifest whose Data lists the model's
// data inputs, as far as setup.Datasets needs them.
func (p *Plan) model(c *config.Config) (*artifacts.Manifest, error) {
	// Prebuilt artifacts bring their optimizer: described as it trains.
	var prebuilt *artifacts.Manifest
	if dir := c.Model.Artifacts; dir != "" {
		var err error
		if prebuilt, err = artifacts.Load(dir); err != nil {
			return nil, &config.Error{Key: "model.artifacts", Msg: fmt.Sprintf("%s: %v", dir, err)}
		}
		if err := setup.AdoptOptimizer(c, prebuilt); err != nil {
			return nil, err
		}
	}
	mc, o := c.Model, c.Optimizer
	pm := &p.Model
	pm.Optimizer, pm.StateCopies = o.Name, 8
	if mc.InitWeights != "" {
		pm.InitWeights = mc.InitWeights
		if !mc.Strict() {
			pm.InitWeights += " (not strict: what matches by name, type and shape)"
		}
	}
	if o.Name == "sgd" {
		pm.StateCopies = 4
		if o.Momentum > 0 {
			pm.Optimizer, pm.StateCopies = fmt.Sprintf("sgd (momentum %g)", o.Momentum), 6
		}
	}
	if o.EMADecay > 0 {
		pm.Optimizer += fmt.Sprintf(", weight EMA %g", o.EMADecay)
		pm.StateCopies += 2 // the average, double-buffered as the weights
	}
	if c.Trainer.AccumulateGradBatches > 1 {
		pm.Optimizer += fmt.Sprintf(", %d micro-batches summed", c.Trainer.AccumulateGradBatches)
		pm.StateCopies++ // a later micro-batch's gradients, before they are added
	}
	m := &artifacts.Manifest{}
	mixes := c.Data.Kind == config.KindImages && c.Data.Images.Mixes()
	switch {
	case mc.Artifacts != "":
		pm.Source = "artifacts " + mc.Artifacts
		m = prebuilt
		pm.Params = m.ParamCount()
	case mc.ONNX != "":
		pm.Source = "onnx " + mc.ONNX
		g, err := graph.Load(mc.ONNX)
		if err != nil {
			return nil, &config.Error{Key: "model.onnx", Msg: err.Error()}
		}
		pm.Params = models.CountParams(g)
		spec, err := loss.Parse(loss.FlagFor(mc.Loss))
		if err != nil {
			return nil, &config.Error{Key: "model.loss", Msg: err.Error()}
		}
		spec.SoftTargets = mixes
		m.Classes = loss.Classes(g, spec)
		if m.Data, err = inputs(g, spec); err != nil {
			return nil, &config.Error{Key: "model.loss", Msg: err.Error()}
		}
	default:
		pm.Source = "recipe " + mc.Recipe
		n, err := models.Check(mc.Recipe, mc.Params)
		if err != nil {
			return nil, &config.Error{Key: "model.params", Msg: err.Error()}
		}
		pm.Params = n
		switch {
		case c.Data.Kind == config.KindSynthetic || c.Data.Kind == config.KindArrays || mixes:
			// Synthetic data is shaped after the graph's inputs, which only
			// building the recipe tells; synthetic runs are small. Arrays
			// are matched to the inputs by name, type and shape.
			rm, err := models.Build(mc.Recipe, mc.Params)
			if err != nil {
				return nil, &config.Error{Key: "model.params", Msg: err.Error()}
			}
			spec, err := loss.Parse(rm.Loss)
			if err != nil {
				return nil, err
			}
			// Mixing images needs the class count the loss's target has.
			spec.LabelSmoothing, spec.SoftTargets = rm.LabelSmoothing, mixes
			if m.Data, err = inputs(rm.Graph, spec); err != nil {
				return nil, err
			}
		case mc.Recipe == "bd3lm":
			// The tokens dataset adds the noised copy when the model reads
			// it; only the names matter there, and building a 124M-parameter
			// LM to learn them takes seconds.
			for _, n := range diffusionlm.Inputs {
				m.Data = append(m.Data, artifacts.Tensor{Name: n})
			}
		}
	}
	if o.WeightDecay > 0 {
		scope := "weights of rank ≥ 2 (biases and norms exempt)"
		if o.DecayBiasAndNorm {
			scope = "every parameter"
		}
		pm.Optimizer += fmt.Sprintf(", weight decay %g on %s", o.WeightDecay, scope)
	}
	pm.StateBytes = int64(pm.StateCopies) * 4 * pm.Params
	p.Arithmetic = arithmetic(c, m)
	p.Notes = append(p.Notes, stateOnlyNote)
	if c.Trainer.Device != "cpu" {
		p.Notes = append(p.Notes, sizesNote)
	}
	return m, nil
}

// stateOnlyNote is the plan's note until MeasureActivations counts the rest.
const stateOnlyNote = "device memory counts the training state only: activations (which grow with the batch) and buffers such as BatchNorm statistics come on top; --memory counts them"

// sizesNote is the plan's note for a GPU run until MeasureActivations
// checks the tensor sizes.
const sizesNote = "tensors over 2^31 − 1 elements, which CUDA kernels cannot take and train refuses on a GPU, are looked for with --memory (it builds the training graph)"

// arithmetic describes the precision setting: what the built artifacts
// record, or what Autocast will do.
func arithmetic(c *config.Config, m *artifacts.Manifest) string {
	if c.Model.Artifacts != "" {
		return m.Precision.String()
	}
	switch c.Trainer.Precision {
	case config.BF16Mixed, config.FP16Mixed:
		low := map[config.Precision]string{config.BF16Mixed: "bfloat16", config.FP16Mixed: "float16"}[c.Trainer.Precision]
		s := "matrix products (MatMul, Gemm, Conv, ConvTranspose, Einsum) and the element-wise ops after them in " + low +
			"; softmax, exp/log, normalisations, reductions and losses in float32 (BatchNorm's output back in its input's type, as autocast has it); master weights, gradients and optimizer state in float32" +
			" (the training state below); the run's first lines count the nodes, after probing the device's kernels; on the CPU the " + low +
			" products are emulated (float32 kernels on rounded values)"
		if c.Trainer.Precision == config.FP16Mixed {
			s += "; dynamic loss scaling (skipped steps on overflow)"
		}
		return s
	case config.TF32:
		return "float32, matrix products on TF32 tensor cores (CUDA)"
	}
	return "float32 throughout"
}

// inputs lists the data inputs of the forward graph g once the loss of spec
// is added (a built-in loss adds its target), as artifacts.Build records them
// in manifest.Data. g is changed.
func inputs(g *graph.Graph, spec loss.Spec) ([]artifacts.Tensor, error) {
	if _, err := loss.Add(g, spec); err != nil {
		return nil, err
	}
	var out []artifacts.Tensor
	for _, name := range g.Inputs {
		info := g.Info(name)
		out = append(out, artifacts.Tensor{Name: name, DType: info.DType.String(), Shape: slices.Clone(info.Shape)})
	}
	return out, nil
}

func (p *Plan) batch(c *config.Config) {
	w := c.Trainer.WorldSize()
	p.Batch = Batch{PerDevice: c.Data.BatchSize, Accumulate: c.Trainer.AccumulateGradBatches, WorldSize: w, Effective: c.EffectiveBatchSize(w)}
	switch {
	case w > 1 && c.Trainer.Device == "auto":
		p.Batch.Collective = "gradients summed with NCCL on each rank's GPU (cuda:<local rank>) where ONNX Runtime has CUDA, else with MPI on the host"
	case w > 1 && c.Trainer.Device != "cpu":
		p.Batch.Collective = "gradients summed with NCCL on each rank's GPU (cuda:<local rank>), the step's scalars with MPI"
	case w > 1:
		p.Batch.Collective = "gradients summed with MPI on the host (CPU ranks)"
	}
	tc := c.Trainer
	p.LR = LR{Base: c.Optimizer.LR, Scaling: tc.LRScaling, BaseBatch: tc.BaseBatchSize, Peak: c.PeakLR(w),
		Schedule: c.Scheduler.Name, MinLR: c.Scheduler.MinLR, Warmup: c.Scheduler.WarmupSteps, WarmupRatio: c.Scheduler.WarmupRatio}
	if p.LR.Scaling == "" {
		p.LR.Scaling = "none"
	}
}

// data fills Data and the loader plan, opening the datasets when it can.
func (p *Plan) data(c *config.Config, m *artifacts.Manifest) {
	d := c.Data
	pd := &p.Data
	pd.Kind = d.Kind
	pd.Train = Path{Key: "data.train", Path: d.Train}
	pd.Val = Path{Key: "data.val", Path: d.Val}
	for _, pp := range []*Path{&pd.Train, &pd.Val} {
		if pp.Path != "" {
			pp.Exists = setup.PathExists(d.Kind, pp.Path)
		}
	}
	switch {
	case d.Kind == config.KindSynthetic:
		pd.Validation = fmt.Sprintf("synthetic, %d samples", setup.SyntheticValLen)
	case d.Val != "":
		pd.Validation = "data.val"
	case d.Kind == config.KindVolumes && d.Volumes.TrainSplit < 1:
		pd.Validation = fmt.Sprintf("%.0f%% of data.train's patients (data.volumes.train_split = %g)", 100*(1-d.Volumes.TrainSplit), d.Volumes.TrainSplit)
	default:
		pd.Validation = "none (data.val not set)"
	}
	switch {
	case d.Kind == config.KindSynthetic:
	case d.Train == "":
		pd.Unopened = "data.train not set — pass --set data.train=PATH"
	case !pd.Train.Exists:
		pd.Unopened = fmt.Sprintf("data.train = %s does not exist", d.Train)
	case d.Val != "" && !pd.Val.Exists:
		pd.Unopened = fmt.Sprintf("data.val = %s does not exist", d.Val)
	}
	lc := setup.LoaderConfig(c, true)
	p.Loader = Loader{Workers: lc.Workers, Prefetch: d.Prefetch, Buffers: lc.Workers + lc.Prefetch + 1, Limit: lc.MaxBytes,
		LimitIsRAM: d.MemoryLimit == 0}
	if pd.Unopened == "" {
		train, val, err := setup.Datasets(c, m)
		var bad interface{ BadInput() bool }
		if err != nil && errors.As(err, &bad) && bad.BadInput() {
			// Data that is there but laid out wrong: train refuses it.
			p.Refusals = append(p.Refusals, err.Error())
		}
		if err != nil {
			pd.Unopened = "cannot open the data: " + err.Error()
		} else {
			if err := setup.CheckData(c, m, train, val); err != nil {
				p.Refusals = append(p.Refusals, err.Error())
			}
			pd.TrainSamples = train.Len()
			if val != nil {
				pd.ValSamples = val.Len()
				if ex, ok := val.(interface{ Examples() int }); ok && ex.Examples() > 0 && ex.Examples() != val.Len() {
					pd.ValSamples, pd.ValDraws = ex.Examples(), val.Len()/ex.Examples()
				}
			}
			p.loader(c, train)
			return
		}
	}
	// Without the dataset the loader plan is estimated from the sample
	// shapes the configuration implies.
	spec, cache, ok := Estimate(c, m)
	if !ok {
		return
	}
	p.Loader.Estimated, p.Loader.Known = true, true
	p.Loader.BatchBytes = int64(d.BatchSize) * specBytes(spec)
	p.Loader.CacheBytes = cache
	p.Loader.TotalBytes = int64(p.Loader.Buffers)*p.Loader.BatchBytes + cache
	p.overLimit()
}

// loader plans the training loader over the opened dataset with data.New,
// the function the trainer uses; the limit is lifted so that a plan over it
// is still measured, then compared.
func (p *Plan) loader(c *config.Config, train data.Dataset) {
	lc := setup.LoaderConfig(c, true)
	lc.MaxBytes = math.MaxInt64
	lc.WorldSize = c.Trainer.WorldSize() // rank 0's shard: every rank's has its size
	l, err := data.New(train, lc)
	if err != nil {
		p.Warnings = append(p.Warnings, "training loader: "+err.Error())
		return
	}
	defer l.Close()
	p.Loader.Known = true
	p.Loader.BatchBytes = int64(c.Data.BatchSize) * specBytes(train.Spec())
	if ca, ok := train.(data.Cacher); ok {
		p.Loader.CacheBytes = ca.CacheBytes()
	}
	p.Loader.TotalBytes = l.PlanBytes()
	p.Steps.PerEpoch = max(1, int64(l.BatchesPerEpoch()/c.Trainer.AccumulateGradBatches))
	p.overLimit()
}

func (p *Plan) overLimit() {
	l := p.Loader
	if l.Limit <= 0 || l.TotalBytes <= l.Limit {
		return
	}
	what := "data.memory_limit = " + data.FormatBytes(l.Limit)
	if l.LimitIsRAM {
		what = "this machine's memory (" + data.FormatBytes(l.Limit) + "; data.memory_limit = 0)"
	}
	p.Refusals = append(p.Refusals, fmt.Sprintf("the loader needs %s, over %s: train would refuse to start; lower data.num_workers, data.prefetch or data.batch_size",
		data.FormatBytes(l.TotalBytes), what))
}

// specBytes is the size of one sample.
func specBytes(spec []data.TensorSpec) int64 {
	var n int64
	for _, t := range spec {
		e := int64(t.DType.Size())
		for _, d := range t.Shape {
			e *= int64(d)
		}
		n += e
	}
	return n
}

// steps fills Steps and the LR points.
func (p *Plan) steps(c *config.Config) error {
	tc := c.Trainer
	s := &p.Steps
	s.MaxEpochs, s.MaxSteps, s.ValInterval = tc.MaxEpochs, tc.MaxSteps, tc.ValCheckInterval.String()
	s.CheckpointEvery, s.SaveTopK, s.Monitor, s.Mode = tc.CheckpointEveryNSteps, tc.SaveTopK, tc.Monitor, tc.Mode
	// The run length as trainer.New works it out: max_steps, cut short by
	// max_epochs × steps per epoch.
	s.Total = tc.MaxSteps
	if e := tc.MaxEpochs; e > 0 {
		switch {
		case s.PerEpoch > 0 && (s.Total == 0 || int64(e)*s.PerEpoch < s.Total):
			s.Total = int64(e) * s.PerEpoch
		case s.PerEpoch == 0:
			s.Total = 0 // max_steps may be cut short by epochs of unknown length
		}
	}
	if p.Data.Validation != "none (data.val not set)" {
		switch {
		case tc.ValCheckInterval.Steps > 0:
			s.ValEvery = tc.ValCheckInterval.Steps
		case s.PerEpoch > 0:
			s.ValEvery = tc.ValCheckInterval.StepsIn(s.PerEpoch)
		}
	}
	sc, lr := c.Scheduler, &p.LR
	decays := sc.Name != "constant"
	if s.Total == 0 && (decays || sc.WarmupRatio > 0) {
		// Only the points before the unknown run length can be given.
		if sc.WarmupRatio == 0 {
			sch := schedule.Schedule{Name: "constant", PeakLR: lr.Peak, WarmupSteps: sc.WarmupSteps}
			lr.Points = append(lr.Points, Point{0, "start", sch.LR(0)})
			if sc.WarmupSteps > 0 {
				lr.Points = append(lr.Points, Point{sc.WarmupSteps, "end of warmup", sch.LR(sc.WarmupSteps)})
			}
		}
		return nil
	}
	sch, err := schedule.FromConfig(c, s.Total, 1)
	if err != nil {
		return err
	}
	lr.Warmup = sch.WarmupSteps
	lr.Points = append(lr.Points, Point{0, "start", sch.LR(0)})
	if sch.WarmupSteps > 0 {
		lr.Points = append(lr.Points, Point{sch.WarmupSteps, "end of warmup", sch.LR(sch.WarmupSteps)})
	}
	if s.Total > 0 {
		lr.Points = append(lr.Points, Point{s.Total / 2, "middle", sch.LR(s.Total / 2)}, Point{s.Total - 1, "last", sch.LR(s.Total - 1)})
	}
	slices.SortStableFunc(lr.Points, func(a, b Point) int { return cmp.Compare(a.Step, b.Step) })
	lr.Points = slices.CompactFunc(lr.Points, func(a, b Point) bool { return a.Step == b.Step })
	return nil
}

// nextVersion is the directory a new run of name under outputDir would
// get, as rundir.New numbers them: one past the highest version_N there.
func nextVersion(outputDir, name string) string {
	next := 0
	des, _ := os.ReadDir(filepath.Join(outputDir, name)) // absent: version_0
	for _, de := range des {
		if v, err := strconv.Atoi(strings.TrimPrefix(de.Name(), "version_")); err == nil && strings.HasPrefix(de.Name(), "version_") && v >= next {
			next = v + 1
		}
	}
	return filepath.Join(outputDir, name, "version_"+strconv.Itoa(next))
}
