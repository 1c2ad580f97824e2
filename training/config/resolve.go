package config

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/ort/ortopt"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/loss"
)

// Resolve fills the values that depend on others and checks the whole
// configuration. It reports every problem found, joined, each an *Error
// naming its keys and where they were set. Resolving twice changes nothing.
func (c *Config) Resolve() error {
	if c.set == nil {
		c.set = map[string]bool{}
	}
	c.fill()
	var errs []error
	for _, key := range nonFinite(reflect.ValueOf(c).Elem(), "") {
		errs = append(errs, &Error{Source: c.origin[key], Key: key, Msg: "is not a finite number"})
	}
	bad := func(key, format string, args ...any) {
		errs = append(errs, &Error{Source: c.origin[key], Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	oneOf := func(key, v string, set ...string) {
		if !slices.Contains(set, v) {
			bad(key, "%q is not one of %s", v, strings.Join(set, ", "))
		}
	}

	// [model]
	m := c.Model
	switch {
	case m.Artifacts != "" && (m.ONNX != "" || m.Recipe != ""):
		bad("model.artifacts", "give either model.artifacts or model.onnx/model.recipe, not both")
	case m.Artifacts == "" && m.ONNX == "" && m.Recipe == "":
		bad("model", "set model.artifacts (a built artifacts directory) or model.recipe (with model.onnx where the recipe needs one)")
	}
	if m.Recipe != "" {
		oneOf("model.recipe", m.Recipe, models.Names()...)
	}
	if m.Loss == "" {
		bad("model.loss", "must name the loss output")
	}
	if m.LabelSmoothing != 0 {
		switch {
		case m.LabelSmoothing < 0 || m.LabelSmoothing >= 1:
			bad("model.label_smoothing", "must be in [0, 1), not %g", m.LabelSmoothing)
		case m.ONNX == "" || lossKind(m.Loss) != loss.CrossEntropy:
			bad("model.label_smoothing", "applies to model.onnx trained with loss = \"cross_entropy\" (recipes set their own; prebuilt artifacts have theirs baked in)")
		}
	}
	if len(m.InputShapes) > 0 && m.Artifacts != "" {
		bad("model.input_shapes", "applies when ortrain builds the training graph; prebuilt artifacts (model.artifacts) keep their shapes (ortrain artifacts build --input-shape)")
	}
	if m.Artifacts != "" && (len(m.Frozen) > 0 || len(m.Trainable) > 0) {
		key := "model.trainable"
		if len(m.Frozen) > 0 {
			key = "model.frozen"
		}
		bad(key, "applies when ortrain builds the training graph; prebuilt artifacts (model.artifacts) train what they were built to train (ortrain artifacts build --frozen/--trainable)")
	}
	for name, dims := range m.InputShapes {
		for _, d := range dims {
			if d < 1 && d != -1 {
				bad("model.input_shapes", "%s: %v has a size %d; give sizes ≥ 1, or -1 for a free dimension", name, dims, d)
				break
			}
		}
	}
	if m.Recompute != "" {
		oneOf("model.recompute", m.Recompute, autodiff.RecomputePolicies...)
		if m.Artifacts != "" {
			bad("model.recompute", "applies when ortrain builds the training graph; prebuilt artifacts (model.artifacts) keep the policy they were built with (ortrain artifacts build --recompute)")
		}
	}
	if m.ConvGrad != "" {
		var forms []string
		for _, f := range autodiff.ConvForms {
			forms = append(forms, string(f))
		}
		oneOf("model.conv_grad", m.ConvGrad, forms...)
		if m.Artifacts != "" {
			bad("model.conv_grad", "applies when ortrain builds the training graph; prebuilt artifacts (model.artifacts) keep the form they were built with (ortrain artifacts build --conv-grad)")
		}
	}
	for _, t := range m.Trainable {
		if slices.Contains(m.Frozen, t) {
			bad("model.frozen", "%q is both trainable and frozen", t)
		}
	}

	// [data]
	d := c.Data
	oneOf("data.kind", d.Kind, DataKinds...)
	if d.Train == "" && d.Kind != KindSynthetic && d.Kind != "" {
		bad("data.train", "required for kind = %q", d.Kind)
	}
	if d.BatchSize < 1 {
		bad("data.batch_size", "must be ≥ 1, not %d", d.BatchSize)
	}
	if d.NumWorkers < 0 {
		bad("data.num_workers", "must be ≥ 0, not %d", d.NumWorkers)
	}
	if d.Prefetch < 1 {
		bad("data.prefetch", "must be ≥ 1, not %d", d.Prefetch)
	}
	// Upper bounds, before anything is sized from these numbers: a loader
	// of 10^18 workers or batches would panic allocating them.
	if d.NumWorkers > MaxWorkers {
		bad("data.num_workers", "%d: at most %d loader workers (each fills and holds a whole batch; a few per CPU core keep any device fed)", d.NumWorkers, MaxWorkers)
	}
	if d.Prefetch > MaxPrefetch {
		bad("data.prefetch", "%d: at most %d batches ahead per worker (PyTorch's prefetch_factor defaults to 2)", d.Prefetch, MaxPrefetch)
	}
	if d.BatchSize >= 1 && d.NumWorkers <= MaxWorkers && d.Prefetch <= MaxPrefetch {
		if most, limit, from := c.maxBatch(); int64(d.BatchSize) > most {
			bad("data.batch_size", "%d does not fit in memory: the loader's %d batch buffers need at least %d bytes per sample for its index alone, before its tensors, over the %s of %s; at most %d (lower data.batch_size, and use trainer.accumulate_grad_batches for a larger effective batch)",
				d.BatchSize, loaderBuffers(d), indexBytes, formatBytes(limit), from, most)
		}
	}
	switch d.Kind {
	case KindVolumes:
		v := d.Volumes
		if len(v.PatchSize) != 3 || slices.Min(v.PatchSize) < 1 {
			bad("data.volumes.patch_size", "must be [D, H, W] with sizes ≥ 1, not %v", v.PatchSize)
		}
		if len(v.Stride) != 3 || slices.Min(v.Stride) < 1 {
			bad("data.volumes.stride", "must be [D, H, W] with steps ≥ 1, not %v", v.Stride)
		}
		if len(v.Window) != 0 && (len(v.Window) != 2 || v.Window[0] >= v.Window[1]) {
			bad("data.volumes.window", "must be [low, high] with low < high, not %v", v.Window)
		}
		if !(v.TrainSplit > 0 && v.TrainSplit <= 1) {
			bad("data.volumes.train_split", "must be in (0, 1], not %g", v.TrainSplit)
		}
		if v.MaxPatients < 0 {
			bad("data.volumes.max_patients", "must be ≥ 0, not %d", v.MaxPatients)
		}
	case KindTokens:
		t := d.Tokens
		if t.SeqLen < 1 {
			bad("data.tokens.seq_len", "must be ≥ 1 for kind = \"tokens\", not %d", t.SeqLen)
		}
		if t.BlockSize < 0 || (t.BlockSize > 0 && t.SeqLen%t.BlockSize != 0) {
			bad("data.tokens.block_size", "must divide data.tokens.seq_len = %d, not be %d", t.SeqLen, t.BlockSize)
		}
		if len(t.Segments) > 0 {
			sum := 0
			for _, n := range t.Segments {
				sum += n
			}
			switch {
			case len(t.Segments) != 3 || slices.Min(t.Segments) < 1 || sum != t.SeqLen:
				bad("data.tokens.segments", "must be [question, plan, execution] lengths ≥ 1 adding up to data.tokens.seq_len = %d, not %v", t.SeqLen, t.Segments)
			case t.BlockSize != 0:
				bad("data.tokens.block_size", "must be 0 with data.tokens.segments (HDP lays out segments, not blocks), not %d", t.BlockSize)
			}
		}
	case KindImages:
		if im := d.Images; im.ValResize != 0 && im.ValResize < im.Size {
			bad("data.images.val_resize", "%d is smaller than the crop data.images.size = %d", im.ValResize, im.Size)
		}
		if d.Images.Size < 1 {
			bad("data.images.size", "must be ≥ 1 for kind = \"images\", not %d", d.Images.Size)
		}
		oneOf("data.images.layout", d.Images.Layout, "NCHW", "NHWC")
	}

	// [trainer]
	t := c.Trainer
	if t.Device != "auto" {
		if _, err := ortopt.ParseDevice(t.Device); err != nil {
			bad("trainer.device", "%q is not \"auto\", \"cpu\", \"cuda\" or \"cuda:N\"", t.Device)
		}
	}
	if t.MaxEpochs < 0 {
		bad("trainer.max_epochs", "%d: must be ≥ 0; 0 leaves the length to trainer.max_steps (Lightning's -1)", t.MaxEpochs)
	} else if t.MaxEpochs > MaxEpochs {
		// The run's length in steps is epochs × steps per epoch: beyond
		// this it could overflow int64 and end the run at once.
		bad("trainer.max_epochs", "%d: at most %d; to train until stopped, set trainer.max_steps instead", t.MaxEpochs, MaxEpochs)
	}
	if t.MaxSteps < 0 {
		bad("trainer.max_steps", "%d: must be ≥ 0; 0 leaves the length to trainer.max_epochs (Lightning's -1)", t.MaxSteps)
	}
	if t.MaxEpochs >= 0 && t.MaxSteps >= 0 && t.MaxEpochs == 0 && t.MaxSteps == 0 {
		bad("trainer.max_steps", "set trainer.max_epochs or trainer.max_steps (both are 0, the run would never end)")
	}
	if t.AccumulateGradBatches < 1 {
		bad("trainer.accumulate_grad_batches", "must be ≥ 1, not %d", t.AccumulateGradBatches)
	} else if t.AccumulateGradBatches > MaxAccumulate {
		// Each optimizer step would load that many batches first: with
		// 10^18 the first step never ends.
		bad("trainer.accumulate_grad_batches", "%d: at most %d micro-batches per optimizer step; for a larger effective batch raise data.batch_size (or trainer.devices)", t.AccumulateGradBatches, MaxAccumulate)
	}
	if t.GradientClipVal < 0 {
		bad("trainer.gradient_clip_val", "must be ≥ 0 (0 disables clipping), not %g", t.GradientClipVal)
	}
	if t.GradientClipAlgorithm == "value" {
		// Lightning's name, refused where plan and train both see it.
		bad("trainer.gradient_clip_algorithm", "\"value\" (clamping each gradient element) is not built: the optimizer clips by the global L2 norm; use \"norm\"")
	} else {
		oneOf("trainer.gradient_clip_algorithm", t.GradientClipAlgorithm, "norm")
	}
	if t.ValCheckInterval.Steps == 0 && !(t.ValCheckInterval.Fraction > 0 && t.ValCheckInterval.Fraction <= 1) {
		bad("trainer.val_check_interval", "a fraction of an epoch must be in (0, 1], not %g", t.ValCheckInterval.Fraction)
	}
	if t.LimitValBatches < 0 {
		bad("trainer.limit_val_batches", "must be ≥ 0 (0: all), not %d", t.LimitValBatches)
	}
	if t.LogEveryNSteps < 1 {
		bad("trainer.log_every_n_steps", "must be ≥ 1, not %d", t.LogEveryNSteps)
	}
	if t.CheckpointEveryNSteps < 0 {
		bad("trainer.checkpoint_every_n_steps", "must be ≥ 0 (0 disables), not %d", t.CheckpointEveryNSteps)
	}
	if t.SaveTopK < -1 {
		bad("trainer.save_top_k", "must be -1 (all), 0 or more, not %d", t.SaveTopK)
	}
	switch {
	case t.Monitor != "" && t.Mode == "":
		bad("trainer.mode", "trainer.monitor = %q needs trainer.mode = \"min\" or \"max\"", t.Monitor)
	case t.Mode != "":
		oneOf("trainer.mode", t.Mode, "min", "max")
		if t.Monitor == "" {
			bad("trainer.monitor", "trainer.mode = %q is set but trainer.monitor is empty", t.Mode)
		}
	}
	if t.EarlyStoppingPatience < 0 {
		bad("trainer.early_stopping_patience", "must be ≥ 0 (0 disables), not %d", t.EarlyStoppingPatience)
	} else if t.EarlyStoppingPatience > 0 && t.Monitor == "" {
		bad("trainer.early_stopping_patience", "early stopping needs trainer.monitor and trainer.mode")
	}
	if t.EarlyStoppingMinDelta < 0 {
		bad("trainer.early_stopping_min_delta", "must be ≥ 0, not %g", t.EarlyStoppingMinDelta)
	}
	oneOf("trainer.lr_scaling", t.LRScaling, "none", "linear", "sqrt")
	if t.BaseBatchSize < 0 {
		bad("trainer.base_batch_size", "must be ≥ 0, not %d", t.BaseBatchSize)
	}
	if t.LRScaling != "none" && t.BaseBatchSize == 0 {
		bad("trainer.base_batch_size", "trainer.lr_scaling = %q needs the batch size the LR was tuned at", t.LRScaling)
	}
	if t.LRScaling == "none" && t.BaseBatchSize > 0 {
		bad("trainer.base_batch_size", "%d has no effect with trainer.lr_scaling = \"none\" (the LR stays optimizer.lr); set trainer.lr_scaling = \"linear\" or \"sqrt\" to scale it, or drop the key", t.BaseBatchSize)
	}
	if t.Precision == FP32 && c.Runtime.UseTF32 {
		bad("runtime.use_tf32", "contradicts trainer.precision = \"32\" (strict fp32); use trainer.precision = \"tf32\"")
	}
	if t.Precision == TF32 && !c.Runtime.UseTF32 {
		bad("runtime.use_tf32", "false contradicts trainer.precision = \"tf32\" (float32 with TF32 tensor cores); use trainer.precision = \"32\" for strict float32")
	}
	if c.Data.Tokens.AntitheticSampling && c.Data.Kind != KindTokens {
		bad("data.tokens.antithetic_sampling", "draws the noise levels of token sequences: data.kind is %q", c.Data.Kind)
	}
	if c.Data.Tokens.ValTSamples < 0 {
		bad("data.tokens.val_t_samples", "%d: want the number of noise draws per validation sequence (at least 1)", c.Data.Tokens.ValTSamples)
	}
	if tk := &c.Data.Tokens; tk.SamplingEpsMin != 0 || tk.SamplingEpsMax != 0 {
		if tk.SamplingEpsMax == 0 {
			tk.SamplingEpsMax = 1 // only the lower clip given
		}
		if !(tk.SamplingEpsMin >= 0 && tk.SamplingEpsMin < tk.SamplingEpsMax && tk.SamplingEpsMax <= 1) {
			bad("data.tokens.sampling_eps_min", "the noise range [%g, %g) must have 0 ≤ sampling_eps_min < sampling_eps_max ≤ 1", tk.SamplingEpsMin, tk.SamplingEpsMax)
		}
	}
	// Lightning refuses devices = 0. Unset means 1, and a saved
	// config.toml writes the unset value as devices = 0, so only a 0 given
	// on the command line is refused.
	if t.Devices < 0 || (t.Devices == 0 && strings.HasPrefix(c.origin["trainer.devices"], "--set ")) {
		bad("trainer.devices", "must be ≥ 1 (the number of processes per node), not %d", t.Devices)
	}
	if t.NumNodes < 0 {
		bad("trainer.num_nodes", "must be ≥ 1, not %d", t.NumNodes)
	}
	oneOf("trainer.strategy", cmp.Or(t.Strategy, "auto"), "auto", "ddp")
	if _, err := ParsePrecision(string(t.Precision)); err != nil {
		bad("trainer.precision", "%v", err)
	}
	for key, v := range map[string]float64{"trainer.loss_scale_init": t.LossScaleInit, "trainer.loss_scale_growth_interval": float64(t.LossScaleGrowthInterval)} {
		switch {
		case v < 0:
			bad(key, "must be ≥ 0 (0: the default), not %g", v)
		case v != 0 && t.Precision != FP16Mixed:
			bad(key, "applies to trainer.precision = \"16-mixed\" only, not %q", t.Precision)
		}
	}
	// The scale reaches the graphs as a float32: beyond its range it is
	// infinite and every step would overflow.
	// (0 stays "the default": configurations saved before the key was
	// omitted when unset write loss_scale_init = 0.0.)
	if ls := t.LossScaleInit; ls > math.MaxFloat32 {
		bad("trainer.loss_scale_init", "%g is beyond float32's range (%g), where the scale is infinite and every step overflows; GradScaler's default is 65536 (2^16)", ls, math.MaxFloat32)
	}

	// [optimizer]
	o := c.Optimizer
	oneOf("optimizer.name", o.Name, "adamw", "sgd")
	if !(o.LR > 0) {
		bad("optimizer.lr", "must be > 0, not %g", o.LR)
	}
	if o.WeightDecay < 0 {
		bad("optimizer.weight_decay", "must be ≥ 0, not %g", o.WeightDecay)
	}
	if len(o.Betas) != 2 || o.Betas[0] < 0 || o.Betas[0] >= 1 || o.Betas[1] < 0 || o.Betas[1] >= 1 {
		bad("optimizer.betas", "must be [β1, β2] in [0, 1), not %v", o.Betas)
	}
	if !(o.Eps > 0) {
		bad("optimizer.eps", "must be > 0, not %g", o.Eps)
	}
	if o.Momentum < 0 || o.Momentum >= 1 {
		bad("optimizer.momentum", "must be in [0, 1), not %g", o.Momentum)
	}
	if o.Name == "adamw" && (o.Momentum != 0 || o.Nesterov) {
		bad("optimizer.momentum", "optimizer.momentum and optimizer.nesterov are for sgd; adamw uses optimizer.betas")
	}
	// Compared with the defaults, not "was it set": a saved config.toml
	// writes every key, betas and eps of an sgd run included.
	if def := Default().Optimizer; o.Name == "sgd" {
		if !slices.Equal(o.Betas, def.Betas) {
			bad("optimizer.betas", "%s: betas are Adam's; sgd has none (it uses optimizer.momentum): drop the key or use optimizer.name = \"adamw\"", strings.ReplaceAll(fmt.Sprint(o.Betas), " ", ", "))
		}
		if o.Eps != def.Eps {
			bad("optimizer.eps", "%g: eps is Adam's; sgd has none: drop the key or use optimizer.name = \"adamw\"", o.Eps)
		}
	}
	if o.Nesterov && o.Momentum == 0 {
		bad("optimizer.nesterov", "needs optimizer.momentum > 0")
	}
	if p := c.Data.Images.RandomErase; !(p >= 0 && p <= 1) {
		bad("data.images.random_erase", "is a probability, not %g", p)
	} else if p > 0 && c.Data.Kind != KindImages {
		bad("data.images.random_erase", "erases boxes of images: data.kind is %q", c.Data.Kind)
	}
	if im := c.Data.Images; im.AutoAugment != "" {
		switch {
		case !slices.Contains(AutoAugments, im.AutoAugment):
			bad("data.images.auto_augment", "%q is not one of %s (\"\" is off)", im.AutoAugment, strings.Join(AutoAugments[1:], ", "))
		case c.Data.Kind != KindImages:
			bad("data.images.auto_augment", "augments images: data.kind is %q", c.Data.Kind)
		}
	}
	if im := c.Data.Images; im.RandaugmentN != nil || im.RandaugmentM != nil {
		n, m := im.RandAugment()
		key := "data.images.randaugment_n"
		if im.RandaugmentN == nil {
			key = "data.images.randaugment_m"
		}
		switch {
		case n < 1:
			bad("data.images.randaugment_n", "is RandAugment's number of ops per image, ≥ 1, not %d (data.images.auto_augment = \"\" applies none)", n)
		case m < 0 || m > 30:
			bad("data.images.randaugment_m", "is a magnitude bin in [0, 30], not %d", m)
		case c.Data.Kind != KindImages:
			bad(key, "sets RandAugment on images: data.kind is %q", c.Data.Kind)
		case im.AutoAugment != "randaugment":
			bad(key, "applies to data.images.auto_augment = \"randaugment\", not %q", im.AutoAugment)
		}
	}
	if im := c.Data.Images; im.MixupAlpha < 0 || im.CutmixAlpha < 0 {
		bad("data.images.mixup_alpha", "mixup_alpha %g and cutmix_alpha %g must be ≥ 0 (0 is off)", im.MixupAlpha, im.CutmixAlpha)
	} else if im.Mixes() {
		switch {
		case c.Data.Kind != KindImages:
			bad("data.images.mixup_alpha", "MixUp and CutMix mix images: data.kind is %q", c.Data.Kind)
		case c.Model.Artifacts != "":
			bad("data.images.mixup_alpha", "needs a loss over class probabilities, which ortrain builds into the artifacts: use model.recipe or model.onnx, not prebuilt artifacts")
		case c.Model.ONNX != "" && lossKind(c.Model.Loss) != loss.CrossEntropy:
			bad("data.images.mixup_alpha", "mixes the targets of a classifier: model.onnx needs loss = %q", loss.CrossEntropy)
		}
	}
	if !(o.EMADecay >= 0 && o.EMADecay < 1) {
		bad("optimizer.ema_decay", "must be 0 (no average) or a decay in (0, 1), not %g", o.EMADecay)
	}

	// [scheduler]
	s := c.Scheduler
	oneOf("scheduler.name", s.Name, "constant", "cosine", "linear")
	if s.WarmupSteps < 0 {
		bad("scheduler.warmup_steps", "must be ≥ 0, not %d", s.WarmupSteps)
	}
	if s.WarmupRatio < 0 || s.WarmupRatio >= 1 {
		bad("scheduler.warmup_ratio", "must be in [0, 1), not %g", s.WarmupRatio)
	}
	if s.WarmupSteps > 0 && s.WarmupRatio > 0 {
		bad("scheduler.warmup_ratio", "give scheduler.warmup_steps or scheduler.warmup_ratio, not both")
	}
	if t.MaxSteps > 0 && s.WarmupSteps > t.MaxSteps {
		bad("scheduler.warmup_steps", "%d exceeds trainer.max_steps = %d", s.WarmupSteps, t.MaxSteps)
	}
	if s.MinLR < 0 || s.MinLR > o.LR {
		bad("scheduler.min_lr", "must be in [0, optimizer.lr = %g], not %g", o.LR, s.MinLR)
	} else if s.MinLR != 0 && s.Name == "constant" {
		bad("scheduler.min_lr", "%g is where a decay ends; scheduler.name = \"constant\" does not decay: set scheduler.name = \"cosine\" or \"linear\", or drop the key", s.MinLR)
	}

	// [runtime]
	r := c.Runtime
	oneOf("runtime.cudnn_conv_algo_search", r.CudnnConvAlgoSearch, "EXHAUSTIVE", "HEURISTIC", "DEFAULT")
	oneOf("runtime.arena_extend_strategy", r.ArenaExtendStrategy, "kNextPowerOfTwo", "kSameAsRequested")
	// Under prefer_nhwc ONNX Runtime runs a ConvTranspose with a computed
	// weight on the CPU: the input gradients of the ops and gemm forms.
	if r.PreferNHWC && c.Model.Artifacts == "" && c.Model.ConvGrad != string(autodiff.ConvFormOffsets) && !r.AllowCPUFallback {
		bad("runtime.prefer_nhwc", "needs model.conv_grad = \"offsets\": ONNX Runtime runs a ConvTranspose whose weight is computed (the input gradients of the ops and gemm forms, gemm being CUDA's default) on the CPU under prefer_nhwc")
	}
	// A captured CUDA graph replays the buffers it was captured with: the
	// trainer binds each batch from one of two staging slots in turn, so a
	// replay would read the slot of the capture's batch, not the step's.
	// And ONNX Runtime 1.29 refuses to capture ortrain's training graphs
	// (H200, 2026-11-26: "not all compute graph nodes partitioned to the
	// CUDAExecutionProvider"), whose batch-size counts come from Shape on
	// the host.
	if r.EnableCUDAGraph {
		bad("runtime.enable_cuda_graph", "is not supported: the trainer stages each batch in one of two device buffers in turn, which a captured graph would not follow, and ONNX Runtime refuses to capture ortrain's training graphs (their batch-size counts are computed on the host); set it to false")
	}
	if r.IntraOpThreads < 0 || r.InterOpThreads < 0 {
		bad("runtime.intra_op_threads", "runtime.intra_op_threads and runtime.inter_op_threads must be ≥ 0 (0: ONNX Runtime chooses)")
	}
	// ONNX Runtime starts every thread of its pools when a session opens:
	// 10^9 of them fails deep inside it (std::bad_alloc) naming no key.
	if r.IntraOpThreads > MaxThreads {
		bad("runtime.intra_op_threads", "%d: at most %d threads (this machine has %d CPUs; 0 lets ONNX Runtime choose)", r.IntraOpThreads, MaxThreads, runtime.NumCPU())
	}
	if r.InterOpThreads > MaxThreads {
		bad("runtime.inter_op_threads", "%d: at most %d threads (this machine has %d CPUs; 0 lets ONNX Runtime choose)", r.InterOpThreads, MaxThreads, runtime.NumCPU())
	}
	return errors.Join(errs...)
}

// fill sets the defaults that depend on other keys, unless the key was
// given explicitly.
func (c *Config) fill() {
	if c.Name == "" {
		c.Name = c.Model.Recipe
		if c.Name == "" {
			c.Name = "run"
		}
	}
	if !c.set["runtime.use_tf32"] {
		c.Runtime.UseTF32 = c.Trainer.Precision != FP32
	}
	if !c.set["optimizer.weight_decay"] && c.Optimizer.Name == "sgd" {
		c.Optimizer.WeightDecay = 0
	}
	if v := &c.Data.Volumes; len(v.Stride) == 0 && len(v.PatchSize) > 0 {
		v.Stride = slices.Clone(v.PatchSize)
	}
	if c.Trainer.Precision == "" {
		c.Trainer.Precision = FP32
	}
	if c.Model.Recompute == autodiff.RecomputeCheap {
		c.Model.Recompute = "" // the default, spelled as runs before the key hash
	}
}

// nonFinite lists the dotted keys of float settings under v that are NaN
// or infinite (TOML writes them nan and inf): a clip threshold of NaN
// would clip nothing, silently.
func nonFinite(v reflect.Value, prefix string) []string {
	var out []string
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			out = append(out, nonFinite(v.Field(i), prefix+name+".")...)
		}
	case reflect.Float32, reflect.Float64:
		if x := v.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
			out = append(out, strings.TrimSuffix(prefix, "."))
		}
	case reflect.Slice:
		for i := range v.Len() {
			out = append(out, nonFinite(v.Index(i), prefix)...)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			out = append(out, nonFinite(v.MapIndex(k), prefix+fmt.Sprint(k.Interface())+".")...)
		}
	case reflect.Interface:
		if !v.IsNil() {
			out = append(out, nonFinite(v.Elem(), prefix)...)
		}
	}
	return out
}

// AutoAugments are the values of data.images.auto_augment, "" (off) first.
var AutoAugments = []string{"", "trivialaugment", "randaugment"}

// lossKind is the built-in loss model.loss names (cross_entropy also as
// cross_entropy:OUTPUT), or loss.Output for the model's own loss output.
func lossKind(modelLoss string) string {
	spec, _ := loss.Parse(loss.FlagFor(modelLoss))
	return spec.Kind
}
