// Package setup turns a run configuration into what a run trains and
// evaluates: the artifacts (prebuilt, or built from model.onnx or a recipe
// into the run directory, with the precision, recompute policy and input
// shapes the config asks for), the datasets of data.kind laid out as the
// model reads them, and the loader settings. train, eval and plan all go
// through it, so they see the same wiring.
package setup

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/diffusionlm"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/arrays"
	"github.com/ortrain/ortrain/training/data/images"
	"github.com/ortrain/ortrain/training/data/tokens"
	"github.com/ortrain/ortrain/training/data/volumes"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/loss"
	"github.com/ortrain/ortrain/training/optim"
	"github.com/ortrain/ortrain/training/precision"
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
	return datasets(c, m, nil)
}

// Validation is the validation set of Datasets alone, for evaluating a
// checkpoint: with the class list the checkpoint recorded (classes, nil
// for none), class folders are labelled by it and data.train is not read.
func Validation(c *config.Config, m *artifacts.Manifest, classes []string) (data.Dataset, error) {
	if c.Data.Kind != config.KindImages || c.Data.Val == "" {
		classes = nil
	}
	_, val, err := datasets(c, m, classes)
	return val, err
}

// datasets is Datasets; recorded, when set, are the image classes a
// checkpoint recorded, and then only the validation set is made.
func datasets(c *config.Config, m *artifacts.Manifest, recorded []string) (train, val data.Dataset, err error) {
	d := c.Data
	for _, p := range []struct{ key, path string }{{"data.train", d.Train}, {"data.val", d.Val}} {
		if p.path == "" || d.Kind == config.KindSynthetic || PathExists(d.Kind, p.path) || (recorded != nil && p.key == "data.train") {
			continue
		}
		if d.Kind == config.KindTokens && tokens.IsPattern(p.path) {
			return nil, nil, &config.Error{Key: p.key, Msg: fmt.Sprintf("%s: no file matches the pattern", abs(p.path))}
		}
		_, err := os.Stat(p.path)
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, nil, &config.Error{Key: p.key, Msg: fmt.Sprintf("%s: %v", abs(p.path), err)}
	}
	switch d.Kind {
	case config.KindSynthetic:
		if train, err = NewSynthetic(m, SyntheticTrainLen, uint64(c.Seed)); err != nil {
			return nil, nil, err
		}
		val, err = NewSynthetic(m, SyntheticValLen, uint64(c.Seed)+1<<32)
		return train, val, err
	case config.KindArrays:
		if d.Train != "" && recorded == nil {
			if train, err = openArrays(c, m, "data.train", d.Train); err != nil {
				return nil, nil, err
			}
		}
		if d.Val != "" {
			val, err = openArrays(c, m, "data.val", d.Val)
		}
		return train, val, err
	case config.KindImages:
		layout := images.NCHW
		if d.Images.Layout == "NHWC" {
			layout = images.NHWC
		}
		// Validation's class folders are labelled by their names' positions
		// in training's sorted list, as a fixed class_to_idx would: a val
		// folder lacking a class keeps the others' labels, and one with a
		// class training lacks is refused. Without data.train (only
		// reachable past config.Resolve, which requires it) val numbers its
		// own classes.
		var trainItems []images.Item
		classes := recorded
		if d.Train != "" && recorded == nil {
			if trainItems, classes, err = imageFolders("data.train", d.Train, nil); err != nil {
				return nil, nil, err
			}
		}
		open := func(items []images.Item, isTrain bool) (data.Dataset, error) {
			raN, raM := d.Images.RandAugment()
			cfg := images.Config{Train: isTrain, Size: d.Images.Size, Resize: d.Images.ValResize, Layout: layout, RandomErase: d.Images.RandomErase,
				AutoAugment: images.AutoAugments[d.Images.AutoAugment], RandAugmentN: raN, RandAugmentM: raM, ClassNames: classes}
			if d.Images.Mixes() {
				// Train and validation give class probabilities for the
				// soft-target loss (one-hot where nothing mixes them).
				n, err := softClasses(m)
				if err != nil {
					return nil, err
				}
				cfg.Classes = n
			}
			return images.New(items, cfg)
		}
		if d.Train != "" && recorded == nil {
			if train, err = open(trainItems, true); err != nil {
				return nil, nil, err
			}
		}
		if d.Val != "" {
			var valItems []images.Item
			if valItems, classes, err = imageFolders("data.val", d.Val, classes); err != nil {
				return nil, nil, err
			}
			val, err = open(valItems, false)
		}
		return train, val, err
	case config.KindVolumes:
		v := d.Volumes
		if err := checkTrainSplit(c); err != nil {
			return nil, nil, err
		}
		// Patients are the top-level entries of the data folder (see
		// volumes.Patient). With data.val, every patient of data.train
		// trains: train_split splits data.train only without it.
		cfg := volumes.Config{Root: d.Train, TrainSplit: v.TrainSplit, SplitSeed: uint64(c.Seed), MaxPatients: v.MaxPatients, SkipBadFiles: d.SkipBadFiles,
			PatchSize: xyz(v.PatchSize), Stride: xyz(v.Stride), CacheBytes: VolumeCacheBytes(c)}
		if d.Val != "" {
			cfg.TrainSplit = 1
		}
		if len(v.Window) == 2 {
			cfg.Window = volumes.Window{Low: float32(v.Window[0]), High: float32(v.Window[1])}
		}
		if cfg.Files, err = findVolumes("data.train", d.Train); err != nil {
			return nil, nil, err
		}
		if train, err = openVolumes(c, "data.train", cfg); err != nil {
			return nil, nil, err
		}
		switch {
		case d.Val != "":
			cfg.Root, cfg.MaxPatients = d.Val, 0
			if cfg.Files, err = findVolumes("data.val", d.Val); err != nil {
				return nil, nil, err
			}
			val, err = openVolumes(c, "data.val", cfg)
		case v.TrainSplit < 1:
			cfg.Val = true
			val, err = openVolumes(c, "data.train", cfg)
		}
		if err != nil {
			return nil, nil, err
		}
		return train, val, nil
	case config.KindTokens:
		if err := checkSegments(c); err != nil {
			return nil, nil, err
		}
		tok, err := tokens.GPT2()
		if err != nil {
			return nil, nil, err
		}
		cfg := TokensConfig(c, m)
		open := func(path string, cfg tokens.Config) (data.Dataset, error) {
			ex, bad, err := tokens.ReadGSM8K(path, d.SkipBadFiles)
			if err != nil {
				return nil, err
			}
			ds, err := tokens.New(ex, tok, cfg)
			if ds != nil {
				ds.BadRecords = bad
			}
			return ds, err
		}
		if train, err = open(d.Train, cfg); err == nil && d.Val != "" {
			cfg.Draws = d.Tokens.ValTSamples
			val, err = open(d.Val, cfg)
		}
		return train, val, err
	}
	return nil, nil, &config.Error{Key: "data.kind", Msg: fmt.Sprintf("%q has no dataset", d.Kind)}
}

// PathExists says whether a data path is there: a file or folder, or for
// GSM8K files a glob pattern matching at least one.
func PathExists(kind, path string) bool {
	if kind == config.KindTokens && tokens.IsPattern(path) {
		m, err := filepath.Glob(path)
		return err == nil && len(m) > 0
	}
	_, err := os.Stat(path)
	return err == nil
}

// softClasses is the class count of a soft-target loss's target input.
func softClasses(m *artifacts.Manifest) (int, error) {
	for _, d := range m.Data {
		if d.Name == loss.Target && len(d.Shape) == 2 && d.Shape[1] > 0 {
			return int(d.Shape[1]), nil
		}
	}
	return 0, &config.Error{Key: "data.images.mixup_alpha", Msg: "the artifacts' loss takes no class probabilities [batch, classes]; they were built without MixUp/CutMix"}
}

// openArrays opens the arrays at path, the value of config key key, for
// the data inputs of m (through data.feeds); what does not fit the model
// is a config error naming the key and the file. Arrays held in memory
// are bounded by data.memory_limit.
func openArrays(c *config.Config, m *artifacts.Manifest, key, path string) (data.Dataset, error) {
	var in []arrays.Input
	for _, t := range m.Data {
		a := arrays.Input{Name: t.Name, DType: t.DType, Shape: t.Shape}
		if t.Name == loss.Target && t.DType == "int64" {
			a.Classes = m.Classes // a built-in cross-entropy's class indices
		}
		in = append(in, a)
	}
	ds, err := arrays.Open(arrays.Config{Path: path, Inputs: in, Feeds: c.Data.Feeds, MaxBytes: LoaderConfig(c, key == "data.train").MaxBytes})
	var ae *arrays.Error
	if errors.As(err, &ae) {
		return nil, &config.Error{Key: key, Msg: ae.Error()}
	}
	if err != nil {
		return nil, err
	}
	return ds, nil
}

// VolumeCacheBytes is the bound of the decoded-volume cache of a volumes
// dataset: half of data.memory_limit, leaving the other half to the batch
// buffers, or 4 GiB without a limit.
func VolumeCacheBytes(c *config.Config) int64 {
	if l := int64(c.Data.MemoryLimit); l > 0 {
		return l / 2
	}
	return 4 << 30
}

// TokensConfig is the layout of token sequences that data.tokens of c
// describes for the model of m: BD3-LM blocks of data.tokens.block_size,
// or HDP-Diffusion's question/plan/execution segments of
// data.tokens.segments; with the noised copy (noisy_ids and t) when the
// model reads it.
func TokensConfig(c *config.Config, m *artifacts.Manifest) tokens.Config {
	t := c.Data.Tokens
	cfg := tokens.Config{SeqLen: t.SeqLen, BlockSize: t.BlockSize, Segments: slices.Clone(t.Segments),
		MinNoise: t.SamplingEpsMin, MaxNoise: t.SamplingEpsMax}
	for _, in := range m.Data {
		cfg.Noise = cfg.Noise || in.Name == diffusionlm.NoisyIDs
	}
	return cfg
}

// checkSegments refuses data segments that differ from the blocks the
// bd3lm recipe was built with: the model's attention mask is fixed by its
// blocks, and sequences laid out otherwise would train silently wrong.
func checkSegments(c *config.Config) error {
	if c.Model.Recipe != "bd3lm" {
		return nil
	}
	var blocks []int
	if b, ok := c.Model.Params["blocks"].([]any); ok {
		for _, v := range b {
			n, ok := v.(int64)
			if !ok {
				return &config.Error{Key: "model.params.blocks", Msg: fmt.Sprintf("%v: want a list of integers", b)}
			}
			blocks = append(blocks, int(n))
		}
	}
	if segs := c.Data.Tokens.Segments; !slices.Equal(blocks, segs) && (len(blocks) > 0 || len(segs) > 0) {
		return &config.Error{Key: "data.tokens.segments", Msg: fmt.Sprintf("%v must equal model.params.blocks = %v: the model's attention follows its blocks", segs, blocks)}
	}
	_, setBlock := c.Model.Params["block_size"]
	if len(blocks) > 0 && setBlock {
		return &config.Error{Key: "model.params.block_size", Msg: fmt.Sprintf("is not used beside model.params.blocks = %v, which set the blocks: drop one", blocks)}
	}
	if len(blocks) == 0 {
		lm, err := models.LMConfig(c.Model.Params)
		if err != nil {
			return &config.Error{Key: "model.params", Msg: err.Error()}
		}
		// The noise level is drawn per data block and the attention masks
		// per model block: unequal, each would train on the other's blocks.
		if b := c.Data.Tokens.BlockSize; b != 0 && b != lm.BlockSize {
			return &config.Error{Key: "data.tokens.block_size", Msg: fmt.Sprintf("%d must equal model.params.block_size = %d: the noise is drawn per block of the model's attention", b, lm.BlockSize)}
		}
	}
	return nil
}

// Artifacts returns the artifact directory to train for c: model.artifacts as
// given (checked to load), or artifacts built into runDir/artifacts from a
// forward model (model.onnx, with the config's loss) or from a built-in
// recipe (model.recipe with model.params), with the config's trainable and
// frozen globs and optimizer. A resumed run finds them there already.
//
// With trainer.precision bf16-mixed the forward graph runs through
// precision.Autocast, with kernels probed on the device of session.
func Artifacts(c *config.Config, runDir string, session ort.Options) (string, *artifacts.Manifest, error) {
	mc := c.Model
	low, mixed, err := precision.Parse(string(c.Trainer.Precision))
	if err != nil {
		return "", nil, &config.Error{Key: "trainer.precision", Msg: err.Error()}
	}
	compute := "float32"
	if mixed {
		compute = low.String()
	}
	// matches refuses artifacts built for another precision.
	matches := func(dir string, m *artifacts.Manifest) error {
		if got := cmp.Or(m.Precision.Compute, "float32"); got != compute {
			return &config.Error{Key: "trainer.precision", Msg: fmt.Sprintf("%q computes in %s, the artifacts in %s in %s; build them with ortrain artifacts build --precision %s",
				c.Trainer.Precision, compute, dir, got, map[bool]string{true: "bf16", false: "fp32"}[mixed])}
		}
		return nil
	}
	if mc.Artifacts != "" {
		m, err := artifacts.Load(mc.Artifacts)
		if err != nil {
			return "", nil, &config.Error{Key: "model.artifacts", Msg: fmt.Sprintf("%s: %v", mc.Artifacts, err)}
		}
		if err := matches(mc.Artifacts, m); err != nil {
			return "", nil, err
		}
		if err := sameLoss(mc.Loss, mc.Artifacts, m); err != nil {
			return "", nil, err
		}
		// Dropout's seeds are attributes of the prebuilt training graph:
		// another run seed would silently keep the built one's masks.
		if s := m.RandomSeed; s != nil && *s != c.Seed {
			return "", nil, &config.Error{Key: "seed", Msg: fmt.Sprintf("%d, but the random nodes (Dropout) of the artifacts in %s were seeded from %d when they were built; set seed = %d, or rebuild them with ortrain artifacts build --seed %d",
				c.Seed, mc.Artifacts, *s, *s, c.Seed)}
		}
		return mc.Artifacts, m, nil
	}
	if mc.ONNX == "" && mc.Recipe == "" {
		return "", nil, &config.Error{Key: "model", Msg: "name prebuilt artifacts (model.artifacts), a forward model (model.onnx) or a built-in recipe (model.recipe)"}
	}
	// A run directory keeps the artifacts of each configuration it trained
	// under: "artifacts" for the first, "artifacts-<hash>" for one a
	// resume changed (discriminators turned on), so each checkpoint's
	// configuration finds the graphs it was trained with.
	hash, err := c.Hash()
	if err != nil {
		return "", nil, err
	}
	out := "" // the first that is not there is where to build
	for _, dir := range []string{filepath.Join(runDir, "artifacts"), filepath.Join(runDir, "artifacts-"+hash[:12])} {
		m, err := artifacts.Load(dir)
		if err != nil {
			out = cmp.Or(out, dir)
			continue
		}
		if m.ConfigHash != "" && m.ConfigHash != hash {
			continue // another configuration's
		}
		if err := matches(dir, m); err != nil {
			return "", nil, err
		}
		return dir, m, nil // built by the run being resumed: eval, export and resume need no model.onnx
	}
	if mc.ONNX != "" {
		if _, err := os.Stat(mc.ONNX); err != nil {
			return "", nil, &config.Error{Key: "model.onnx", Msg: err.Error()}
		}
	}
	o := c.Optimizer
	// The resolved config holds every value: a zero weight decay is zero.
	oc := optim.Config{Kind: o.Name, LR: o.LR, WeightDecay: o.WeightDecay, Eps: o.Eps, Momentum: o.Momentum, Nesterov: o.Nesterov,
		EMADecay: o.EMADecay, Exact: true}
	if len(o.Betas) == 2 {
		oc.Beta1, oc.Beta2 = o.Betas[0], o.Betas[1]
	}
	if o.DecayBiasAndNorm {
		oc.NoDecay = []string{} // every parameter decays; nil exempts rank ≤ 1
	}
	opts := artifacts.Options{Model: mc.ONNX, Out: out, ConfigHash: hash, Trainable: mc.Trainable, Frozen: mc.Frozen, Optimizer: oc, Recompute: mc.Recompute, InputShapes: mc.InputShapes,
		Seed: c.Seed, SoftTargets: c.Data.Kind == config.KindImages && c.Data.Images.Mixes()}
	if mixed {
		opts.Precision, opts.Probe = low, precision.NewProbe(session, graph.EmitOpset)
	}
	// Graphs for the run's device: a plan made on the CPU for a GPU run
	// builds them as the run will.
	runDev, err := ort.ParseDevice(c.Trainer.Device)
	opts.CUDA = session.Device.CUDA || err == nil && runDev.CUDA
	opts.ConvForm = autodiff.ConvFormFor(opts.CUDA)
	if mc.ConvGrad != "" {
		opts.ConvForm = autodiff.ConvForm(mc.ConvGrad) // checked by the config
	}
	source := mc.ONNX
	if mc.ONNX == "" {
		rm, err := models.Build(mc.Recipe, mc.Params)
		if err != nil {
			return "", nil, &config.Error{Key: "model.params", Msg: err.Error()}
		}
		opts.Graph, opts.Loss, opts.LabelSmoothing = rm.Graph, rm.Loss, rm.LabelSmoothing
		opts.Optimizer.ClipGroups = rm.ClipGroups
		opts.Frozen = append(slices.Clone(opts.Frozen), rm.Frozen...)
		source = "recipe " + mc.Recipe
	} else {
		opts.Loss = loss.FlagFor(mc.Loss)
		opts.LabelSmoothing = mc.LabelSmoothing
	}
	m, err := artifacts.Build(opts)
	if err != nil {
		return "", nil, fmt.Errorf("building artifacts from %s: %w", source, err)
	}
	return out, m, nil
}

// sameLoss refuses a model.loss other than the default that differs from
// the loss prebuilt artifacts were built with: their training graph has
// it baked in, and the key would be ignored.
func sameLoss(modelLoss, dir string, m *artifacts.Manifest) error {
	if modelLoss == "" || modelLoss == config.Default().Model.Loss {
		return nil
	}
	want, err := loss.Parse(loss.FlagFor(modelLoss))
	if err != nil {
		return &config.Error{Key: "model.loss", Msg: err.Error()}
	}
	first := ""
	if len(m.Outputs) > 0 {
		first = m.Outputs[0]
	}
	got := m.LossSpec
	if want.Kind == got.Kind && (want.Kind == loss.Output && want.Output == got.Output || want.Kind != loss.Output && cmp.Or(want.Output, first) == cmp.Or(got.Output, first)) {
		return nil
	}
	return &config.Error{Key: "model.loss", Msg: fmt.Sprintf("%q differs from the loss the artifacts in %s were built with (%s): prebuilt artifacts keep theirs (rebuild with ortrain artifacts build --loss)",
		modelLoss, abs(dir), loss.Describe(m.Outputs, got))}
}

// abs is path made absolute, for messages.
func abs(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// xyz turns the config's [D, H, W] (tensor order) into the volumes
// package's NIfTI order [x, y, z].
func xyz(dhw []int) [3]int {
	if len(dhw) != 3 {
		return [3]int{}
	}
	return [3]int{dhw[2], dhw[1], dhw[0]}
}

// LoaderConfig is the loader setup data of c describes, for the training
// set (shuffled, dropping the last batch as configured) or, with train
// false, the validation set (in order, every sample).
func LoaderConfig(c *config.Config, train bool) data.Config {
	d := c.Data
	limit := int64(d.MemoryLimit)
	if limit == 0 { // data.memory_limit = 0: the machine's memory
		limit = data.PhysicalMemory()
	}
	// num_workers = 0 (load on the training goroutine) runs one worker:
	// the loader always loads ahead.
	// data.prefetch counts per worker, as PyTorch's prefetch_factor: the
	// loader's Prefetch is the batches waiting in all.
	workers := max(1, d.NumWorkers)
	cfg := data.Config{BatchSize: d.BatchSize, Workers: workers, Prefetch: workers * d.Prefetch,
		MaxBytes: limit, Seed: uint64(c.Seed), Shuffle: d.Shuffle, DropLast: d.DropLast, SkipBadFiles: d.SkipBadFiles}
	if !train {
		cfg.Shuffle, cfg.DropLast = false, false
	}
	if tk := d.Tokens; train && d.Kind == config.KindTokens && tk.AntitheticSampling {
		cfg.Mix = tokens.Antithetic{BlockSize: tk.BlockSize, Segmented: len(tk.Segments) > 0, MinNoise: tk.SamplingEpsMin, MaxNoise: tk.SamplingEpsMax}.Mix
	}
	if im := d.Images; train && d.Kind == config.KindImages && im.Mixes() {
		mixer := images.Mixer{MixUpAlpha: im.MixupAlpha, CutMixAlpha: im.CutmixAlpha}
		if im.Layout == "NHWC" {
			mixer.Layout = images.NHWC
		}
		cfg.Mix = mixer.Mix
	}
	return cfg
}

// imageFolders lists the class folders at path, the value of config key
// key: numbered in sorted order with classes nil (returned), else labelled
// by their names' positions in classes. A path not laid out as class
// folders of images is a config error naming the key.
func imageFolders(key, path string, classes []string) ([]images.Item, []string, error) {
	var items []images.Item
	var err error
	if classes == nil {
		items, classes, err = images.Folders(path)
	} else {
		items, err = images.MapFolders(path, classes)
	}
	if fe, ok := err.(*images.FolderError); ok {
		return nil, nil, &config.Error{Key: key, Msg: fe.Error()}
	}
	return items, classes, err
}

// checkTrainSplit refuses data.volumes.train_split set below 1 beside
// data.val, which replaces the split: the user meant one or the other.
// Only a value other than the default is refused, since a run's saved
// config.toml (read back by --config) holds every key, the default
// train_split included, and must reproduce the run.
func checkTrainSplit(c *config.Config) error {
	v := c.Data.Volumes
	if c.Data.Val == "" || v.TrainSplit >= 1 || !c.IsSet("data.volumes.train_split") || v.TrainSplit == config.Default().Data.Volumes.TrainSplit {
		return nil
	}
	return &config.Error{Key: "data.volumes.train_split", Msg: fmt.Sprintf("%g would split data.train into training and validation patients, but data.val = %s is the validation set and every data.train patient trains; drop data.volumes.train_split, or data.val to validate on a split of data.train",
		v.TrainSplit, c.Data.Val)}
}

// findVolumes lists the volume files of the data folder that key names;
// a folder that is missing or holds none is a config error naming key
// and the folder's absolute path.
func findVolumes(key, dir string) ([]string, error) {
	files, err := volumes.Find(dir)
	if err != nil {
		return nil, &config.Error{Key: key, Msg: err.Error()}
	}
	return files, nil
}

// openVolumes makes the volumes dataset of cfg from the folder key names.
// A split that leaves validation without a patient is a config error.
func openVolumes(c *config.Config, key string, cfg volumes.Config) (*volumes.Dataset, error) {
	ds, err := volumes.New(cfg)
	if se, ok := err.(*volumes.SplitError); ok && se.Val {
		of := fmt.Sprintf("%d patient", se.Patients)
		if m := c.Data.Volumes.MaxPatients; m > 0 {
			of += fmt.Sprintf(" (data.volumes.max_patients = %d)", m)
		}
		return nil, &config.Error{Key: "data.val", Msg: fmt.Sprintf("not set, and data.volumes.train_split = %g of the %s in data.train = %s leaves none for validation: set data.val to a validation folder, or data.volumes.train_split = 1 to train without validation",
			se.TrainSplit, of, c.Data.Train)}
	}
	if err != nil {
		return nil, err
	}
	return ds, nil
}
