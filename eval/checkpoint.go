package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ortrain/ortrain/eval/report"
	"github.com/ortrain/ortrain/eval/sliding"
	"github.com/ortrain/ortrain/metrics"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/data/tokens"
	"github.com/ortrain/ortrain/training/data/volumes"
	"github.com/ortrain/ortrain/training/optim"
	"github.com/ortrain/ortrain/training/rundir"
	"github.com/ortrain/ortrain/training/safetensors"
	"github.com/ortrain/ortrain/training/setup"
	"github.com/ortrain/ortrain/training/validation"
)

// CheckpointOptions say what `ortrain eval --checkpoint` evaluates.
type CheckpointOptions struct {
	// Checkpoint is a checkpoint directory, a run's version directory (its
	// newest checkpoint) or "last" (with Config naming the run).
	Checkpoint string
	// Config replaces the configuration saved in the checkpoint; nil keeps it.
	Config *config.Config
	// Overwrite lets Out replace an existing file.
	Overwrite bool
	// Sets are --set overrides applied to the checkpoint's configuration
	// when Config is nil (data.val=..., a new validation set).
	Sets []string
	// Inputs are volume files (NIfTI or .npy) to reconstruct instead of
	// the validation set (volume models only).
	Inputs []string
	// Out is where the reconstruction of a single input is written (NIfTI,
	// or NumPy's format for a .npy path).
	Out string
	// Overlap and Mode configure the sliding windows; BatchSize the windows
	// per run of the model.
	Overlap   float64
	Mode      sliding.Mode
	BatchSize int
	Session   ort.Options
	// DataRange, when > 0, is the intensity range PSNR and SSIM assume
	// (scikit-image's data_range); 0 takes the intensity window's width,
	// or each reference's max − min when the model has no window.
	DataRange float64
	// VolumeFlags names the volume-only command-line flags the user gave
	// (--overlap, --blend, --data-range ...): refused, naming them, for a
	// model that is not a volume model rather than ignored.
	VolumeFlags []string
	// VolumeProgress, when set, hears of each volume's reconstruction:
	// once when it starts (Done 0), then after every batch of windows.
	VolumeProgress func(VolumeProgress)
	// Warn, when set, hears of what the results should be read with
	// (a --data-range far below the data's range).
	Warn func(string)
	// Generate, for a bd3lm checkpoint, samples answers to the first
	// Generate validation questions with Decoding and reports GSM8K's
	// exact-match accuracy as val/exact_match; Progress, when set, hears
	// of each answer.
	Generate int
	Decoding Decoding
	Progress func(done, correct, total int)
}

// CheckpointResult is what an evaluation measured.
type CheckpointResult struct {
	Checkpoint string `json:"checkpoint"`
	Step       int64  `json:"step"`
	// Volumes holds per-volume reconstruction metrics (volume models).
	Volumes []VolumeMetrics `json:"volumes,omitempty"`
	// Mean averages the per-volume metrics, or holds the validation loss
	// and accuracies of other models.
	Mean map[string]float64 `json:"mean"`
	// MeanOf counts the volumes each mean is over: SSIM and MS-SSIM are
	// not computed for volumes too small for their windows.
	MeanOf map[string]int `json:"mean_of,omitempty"`
	// DataRange is the --data-range the volumes were measured with (0:
	// each volume's data_range says what it was).
	DataRange float64 `json:"data_range,omitempty"`
	// Window is the model's intensity window (data.volumes.window), nil
	// when it has none and each volume is windowed to its own min..max;
	// ReferenceClipped says the references were clamped to it before
	// measuring (each volume's clipped_voxels counts the voxels clamped).
	Window           *[2]float64 `json:"window,omitempty"`
	ReferenceClipped *bool       `json:"reference_clipped,omitempty"`
	// Skipped lists the validation files data.skip_bad_files dropped,
	// with what was wrong with them (val/skipped_samples counts them).
	Skipped []string `json:"skipped_files,omitempty"`
	// Reports holds the report entries of the volumes (not serialised).
	Reports []report.VolumeResult `json:"-"`
	// Generations are the answers sampled for Generate (written apart).
	Generations []Generation `json:"-"`
}

// EvaluateCheckpoint loads a checkpoint's weights into its eval graph and
// measures it: volume models reconstruct whole volumes with sliding windows
// and get PSNR, SSIM, MS-SSIM, MAE and MSE in the intensity window's units;
// other models get the mean validation loss (and top-1/top-5 accuracy when
// the model classifies).
func EvaluateCheckpoint(ctx context.Context, o CheckpointOptions) (*CheckpointResult, error) {
	lc, err := openCheckpoint(o.Checkpoint, o.Config, o.Sets, o.Session)
	if err != nil {
		return nil, err
	}
	defer lc.close()
	cfg, ck, ckDir, dir, m, weights := lc.cfg, lc.ck, lc.ck.Dir, lc.dir, lc.m, lc.weights
	res := &CheckpointResult{Checkpoint: ckDir, Step: ck.State.Step, Mean: map[string]float64{}}
	var gen *Sampler
	var questions []tokens.Example
	if o.Generate > 0 {
		// Refused before the validation pass: another recipe, no questions.
		if gen, questions, err = generationSetup(lc, o); err != nil {
			return nil, err
		}
		defer gen.Close()
	}
	isVolumes := cfg.Data.Kind == config.KindVolumes || len(o.Inputs) > 0
	if !isVolumes && len(o.VolumeFlags) > 0 {
		return nil, &InputError{Err: fmt.Errorf("%s: only volume models (data.kind = \"volumes\") reconstruct volumes; the model of %s is trained on data.kind = %q, and eval measures it on its validation set",
			strings.Join(o.VolumeFlags, ", "), ckDir, cfg.Data.Kind)}
	}
	if isVolumes {
		err = res.volumes(ctx, o, cfg, dir, weights)
	} else {
		err = res.loss(cfg, dir, m, weights, o.Session, ck.State.Classes)
	}
	if err == nil && gen != nil {
		var progress func(done, correct int)
		if o.Progress != nil {
			progress = func(done, correct int) { o.Progress(done, correct, len(questions)) }
		}
		var acc float64
		if acc, res.Generations, err = ExactMatch(ctx, gen, questions, o.Decoding, progress); err == nil {
			res.Mean[metrics.ValExactMatch] = acc
			res.Mean[metrics.ValGenerated] = float64(len(questions))
		}
	}
	return res, err
}

// generationSetup makes the sampler for o.Generate and reads the first
// o.Generate questions of the validation file (all when it has fewer).
func generationSetup(lc *loadedCheckpoint, o CheckpointOptions) (*Sampler, []tokens.Example, error) {
	if err := o.Decoding.Check(); err != nil {
		return nil, nil, err
	}
	cfg := lc.cfg
	if cfg.Data.Kind != config.KindTokens || cfg.Data.Val == "" {
		return nil, nil, &InputError{File: lc.ck.Dir, Err: errors.New("--generate answers the validation questions: the configuration needs data.kind = \"tokens\" and data.val (a GSM8K JSONL file; --set data.val=PATH)")}
	}
	s, err := newSampler(lc, o.Session)
	if err != nil {
		return nil, nil, err
	}
	ex, _, err := tokens.ReadGSM8K(cfg.Data.Val, cfg.Data.SkipBadFiles)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, ex[:min(o.Generate, len(ex))], nil
}

// loadedCheckpoint is a checkpoint with the configuration it is evaluated
// under, its artifacts and its weights.
type loadedCheckpoint struct {
	cfg     *config.Config
	ck      *checkpoint.Checkpoint
	dir     string // the artifacts
	m       *artifacts.Manifest
	weights WeightSource
	close   func()
}

// openCheckpoint finds the checkpoint spec names (a checkpoint directory, a
// version directory or "last" with cfg naming the run) and loads it with
// cfg, or with the configuration saved in it and sets on top when cfg is
// nil; the artifacts are built for it if needed.
func openCheckpoint(spec string, cfg *config.Config, sets []string, session ort.Options) (*loadedCheckpoint, error) {
	outputDir, name := "outputs", ""
	if cfg != nil {
		outputDir, name = cfg.OutputDir, cfg.Name
	}
	ckDir, version, err := rundir.FindCheckpoint("--checkpoint", spec, outputDir, name)
	if err != nil {
		return nil, err
	}
	ck, err := checkpoint.Load(ckDir)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*loadedCheckpoint, error) {
		ck.Close()
		return nil, err
	}
	if cfg == nil {
		// The run's own configuration, with the caller's --set on top.
		if cfg, err = config.Parse([]byte(ck.State.Config), filepath.Join(ckDir, checkpoint.StateFile)); err == nil {
			if err = cfg.Override(sets...); err == nil {
				err = cfg.Resolve()
			}
		}
		if err != nil {
			return fail(err)
		}
	} else if len(sets) > 0 {
		return fail(fmt.Errorf("eval: Sets apply to the checkpoint's configuration; with Config given, apply them to it"))
	}
	dir, m, err := setup.Artifacts(cfg, version, session)
	if err != nil {
		return fail(err)
	}
	weights, closeWeights, err := checkpointWeights(ck, dir, m)
	if err != nil {
		return fail(err)
	}
	return &loadedCheckpoint{cfg: cfg, ck: ck, dir: dir, m: m, weights: weights,
		close: func() { closeWeights(); ck.Close() }}, nil
}

// checkpointWeights serves the eval graph's weights from the checkpoint,
// and frozen parameters (which checkpoints do not store) from the artifacts'
// initial weights. Every parameter must be in the checkpoint with the shape
// the graph expects: anything else is the checkpoint of another model.
func checkpointWeights(ck *checkpoint.Checkpoint, dir string, m *artifacts.Manifest) (WeightSource, func(), error) {
	initial, err := safetensors.Open(filepath.Join(dir, m.Files["weights"]))
	if err != nil {
		return nil, nil, err
	}
	mismatch := func(format string, args ...any) error {
		return &InputError{File: ck.Dir, Err: fmt.Errorf("does not match the model in %s: "+format, append([]any{dir}, args...)...)}
	}
	for _, p := range m.Params {
		info, ok := ck.Tensors.Info(p.Name)
		if !ok {
			initial.Close()
			return nil, nil, mismatch("it has no parameter %s", p.Name)
		}
		if info.DType.String() != p.DType || !sameDims(info.Shape, p.Shape) {
			initial.Close()
			return nil, nil, mismatch("parameter %s is %v%v there, %s%v in the model", p.Name, info.DType, info.Shape, p.DType, p.Shape)
		}
	}
	source := func(name string) (*ort.Value, error) {
		f, stored := ck.Tensors, storedName(ck, name)
		info, ok := f.Info(stored)
		if !ok {
			f, stored = initial, name
			if info, ok = f.Info(name); !ok {
				return nil, mismatch("neither it nor the initial weights hold %s", name)
			}
		}
		v, err := ort.NewEmpty(info.DType, info.Shape)
		if err != nil {
			return nil, err
		}
		if err := f.ReadInto(stored, v.RawBytes()); err != nil {
			v.Close()
			return nil, err
		}
		return v, nil
	}
	return source, func() { initial.Close() }, nil
}

// storedName is the checkpoint tensor that holds a weight's value for
// evaluation: a parameter's moving average when the run kept one
// (optimizer.ema_decay), else the weight itself.
func storedName(ck *checkpoint.Checkpoint, name string) string {
	if _, ok := ck.Tensors.Info(optim.EMAName(name)); ok {
		return optim.EMAName(name)
	}
	return name
}

func sameDims(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if b[i] >= 0 && a[i] != b[i] {
			return false
		}
	}
	return true
}

// volumes reconstructs o.Inputs, or the validation volumes, whole.
func (r *CheckpointResult) volumes(ctx context.Context, o CheckpointOptions, cfg *config.Config, dir string, weights WeightSource) error {
	files, root := o.Inputs, ""
	if len(files) == 0 {
		var err error
		if files, root, err = validationVolumes(cfg); err != nil {
			return err
		}
	}
	ids := volumeIDs(root, files)
	if o.Out != "" {
		if len(files) != 1 {
			return &InputError{File: o.Out, Err: fmt.Errorf("--out writes one reconstruction, but %d volumes are evaluated: pass one --input", len(files))}
		}
		if _, err := os.Stat(o.Out); err == nil && !o.Overwrite {
			return &InputError{File: o.Out, Err: errors.New("exists; ortrain does not overwrite it without --overwrite")}
		}
	}
	model, err := OpenModel(dir, weights, o.Session)
	if err != nil {
		return err
	}
	defer model.Close()
	var w volumes.Window
	if v := cfg.Data.Volumes.Window; len(v) == 2 {
		w = volumes.Window{Low: float32(v[0]), High: float32(v[1])}
		r.Window = &[2]float64{float64(w.Low), float64(w.High)}
	}
	clipped := r.Window != nil
	r.ReferenceClipped = &clipped
	r.DataRange = o.DataRange
	patch := model.Patch() // [D, H, W]
	if p := cfg.Data.Volumes.PatchSize; len(p) == 3 {
		patch = [3]int(p)
	}
	for i, f := range files {
		vol, err := readVolume(f)
		if err != nil {
			return err
		}
		shape := Shape(vol)
		if w == (volumes.Window{}) {
			// Without a window the volume is mapped from its own min..max,
			// which a constant volume does not have.
			if lo, hi, err := finiteRange(vol.Data); err == nil && lo == hi {
				return &InputError{File: f, Err: fmt.Errorf("the volume is constant (every voxel %g), so it has no min..max to window to the model's [-1, 1]: give the window the model was trained on, --set 'data.volumes.window=[LOW,HIGH]' (PSNR and SSIM then take its width as the data range, or --data-range)", lo)}
			}
		}
		sopt := sliding.Options{Patch: patch, Overlap: o.Overlap, Mode: o.Mode, BatchSize: o.BatchSize}
		if o.VolumeProgress != nil {
			p := VolumeProgress{Name: ids[i], Index: i + 1, Volumes: len(files), Patch: patch, Overlap: o.Overlap}
			for a := range 3 {
				p.Shape[a] = max(shape[a], patch[a]) // padded as Reconstruct pads
			}
			p.Interval = sopt.Interval()
			if p.Windows, err = sliding.Windows(p.Shape, sopt); err != nil {
				return &InputError{File: f, Err: err}
			}
			def := sopt
			def.Overlap = DefaultOverlap
			p.DefaultWindows, _ = sliding.Windows(p.Shape, def)
			o.VolumeProgress(p)
			sopt.Progress = func(done, _ int) {
				p.Done = done
				o.VolumeProgress(p)
			}
		}
		rec, err := Reconstruct(ctx, model, vol.Data, shape, w, sopt)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		dataRange := o.DataRange
		if dataRange == 0 && w.High > w.Low {
			dataRange = float64(w.High - w.Low)
		}
		vm, err := Compare(f, rec.Recon, rec.Reference, shape, dataRange)
		if err != nil {
			return err
		}
		vm.ID = ids[i]
		vm.Window = &rec.Window
		vm.Clipped = &rec.Clipped
		if err := checkFinite(f, rec.Recon); err != nil {
			return err
		}
		if o.DataRange > 0 && o.Warn != nil {
			if note := rangeNote("--data-range", o.DataRange, rec.Reference); note != "" {
				o.Warn(fmt.Sprintf("%s: %s", f, note))
			}
		}
		r.Volumes = append(r.Volumes, vm)
		ref := &nifti.Volume{Header: vol.Header, Data: rec.Reference}
		entry := vm.ReportEntry(ref, rec.Recon)
		if rec.Clipped > 0 {
			entry.InputLabel = fmt.Sprintf("input clipped to [%g, %g]", rec.Window[0], rec.Window[1])
		}
		if isArray(f) {
			entry.Spacing, entry.SpacingUnknown = [3]float64{}, true
		}
		r.Reports = append(r.Reports, entry)
		if o.Out != "" {
			if err := volumes.Write(o.Out, vol.Header, rec.Recon); err != nil {
				return err
			}
		}
	}
	return r.volumeMeans()
}

// volumeMeans averages the volumes' metrics into Mean, counting in MeanOf
// the volumes each is over: SSIM and MS-SSIM are the means of the volumes
// they are computed for.
func (r *CheckpointResult) volumeMeans() error {
	sums := map[string]*metrics.Mean{}
	r.MeanOf = map[string]int{}
	for _, vm := range r.Volumes {
		means := map[string]float64{"psnr": vm.PSNR, "mae": vm.MAE, "mse": vm.MSE}
		if vm.SSIM != nil {
			means["ssim"] = *vm.SSIM
		}
		if vm.MSSSIM != nil {
			means["ms_ssim"] = *vm.MSSSIM
		}
		for k, v := range means {
			if sums[k] == nil {
				sums[k] = &metrics.Mean{}
			}
			sums[k].Add(v)
			r.MeanOf[k]++
		}
	}
	for k, s := range sums {
		var err error
		if r.Mean[k], err = s.Value(); err != nil {
			return err
		}
	}
	return nil
}

// checkFinite refuses a reconstruction with NaN or Inf rather than
// reporting a metric computed over it.
func checkFinite(name string, x []float32) error {
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%s: the model's reconstruction holds %v at voxel %d: the checkpoint's weights are broken", name, v, i)
		}
	}
	return nil
}

// validationVolumes lists the volumes validation would patch: data.val, or
// the validation side of the patient split of data.train; and the data
// folder they were found under. A folder that is missing or holds no
// volumes is bad input naming its key and absolute path.
func validationVolumes(cfg *config.Config) ([]string, string, error) {
	d := cfg.Data
	if d.Val != "" {
		files, err := volumes.Find(d.Val)
		if err != nil {
			return nil, "", &InputError{Err: fmt.Errorf("data.val: %w", err)}
		}
		return files, d.Val, nil
	}
	if d.Train == "" {
		return nil, "", &InputError{Err: errors.New("the config names no validation volumes (data.val) and no training volumes to split: pass --input")}
	}
	all, err := volumes.Find(d.Train)
	if err != nil {
		return nil, "", &InputError{Err: fmt.Errorf("data.train: %w", err)}
	}
	split := volumes.SplitFiles(volumes.Config{Files: all, Root: d.Train, TrainSplit: d.Volumes.TrainSplit, SplitSeed: uint64(cfg.Seed), MaxPatients: d.Volumes.MaxPatients, Val: true})
	if len(split) == 0 {
		return nil, "", &InputError{File: d.Train, Err: errors.New("the patient split leaves no validation volume: pass --input")}
	}
	return split, d.Train, nil
}

// loss runs the validation set through the eval graph once.
func (r *CheckpointResult) loss(cfg *config.Config, dir string, m *artifacts.Manifest, weights WeightSource, opts ort.Options, classes []string) error {
	val, err := setup.Validation(cfg, m, classes)
	if err != nil {
		return err
	}
	if val == nil {
		return &InputError{Err: errors.New("the config names no validation data (data.val)")}
	}
	bad := &recordingDataset{Dataset: val}
	val = bad
	sess, err := ort.NewSession(filepath.Join(dir, m.Files["eval"]), opts)
	if err != nil {
		return err
	}
	defer sess.Close()
	inputs := map[string]*ort.Value{}
	defer func() {
		for _, v := range inputs {
			v.Close()
		}
	}()
	for _, name := range weightNames(m) {
		if inputs[name], err = weights(name); err != nil {
			return err
		}
	}
	lc := setup.LoaderConfig(cfg, false)
	lc.Epochs = 1
	loader, err := data.New(val, lc)
	if err != nil {
		return err
	}
	defer loader.Close()
	// The metrics validation reports, computed as it computes them.
	vm := validation.New(m, cfg)
	fetch := validation.Outputs(m)
	for {
		b, err := loader.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			// A file that cannot be loaded (data.skip_bad_files = false):
			// the message names it; it is the user's to fix.
			return &InputError{Err: fmt.Errorf("validation data: %w", err)}
		}
		batch := map[string]*ort.Value{}
		for _, d := range m.Data {
			t, _, err := data.Feeds(cfg.Data.Feeds).Source(d.Name, b)
			if err != nil {
				return fmt.Errorf("validation data: %w", err)
			}
			v, err := hostValue(t)
			if err != nil {
				return err
			}
			batch[d.Name] = v
			inputs[d.Name] = v
		}
		outs, err := sess.Run(inputs, append([]string{m.Loss}, fetch...)...)
		for _, v := range batch {
			v.Close()
		}
		if err != nil {
			return err
		}
		named := map[string]*ort.Value{}
		for i, name := range fetch {
			named[name] = outs[1+i]
		}
		err = vm.Add(b, b.Tensors[0].Shape[0], float64(ort.Data[float32](outs[0])[0]), named)
		for _, o := range outs {
			o.Close()
		}
		if err != nil {
			return err
		}
	}
	r.Skipped = bad.failures()
	if vm.Rows() == 0 {
		if len(r.Skipped) > 0 {
			return &InputError{Err: fmt.Errorf("every one of the %d validation samples is a bad file (data.skip_bad_files dropped them), e.g. %s", len(r.Skipped), r.Skipped[0])}
		}
		return &InputError{Err: errors.New("the validation set is empty")}
	}
	vm.Report(r.Mean)
	if cfg.Data.SkipBadFiles {
		// The metrics above are over fewer samples than the set holds.
		r.Mean["val/skipped_samples"] = float64(loader.Stats().Skipped)
	}
	return nil
}

// recordingDataset is a validation set that keeps the errors of the
// samples it failed to load, which the loader drops without a word when
// data.skip_bad_files is set.
type recordingDataset struct {
	data.Dataset
	mu   sync.Mutex
	errs map[int]string
}

func (d *recordingDataset) Load(i int, rng *rand.Rand, dst data.Sample) error {
	err := d.Dataset.Load(i, rng, dst)
	if err != nil {
		d.mu.Lock()
		if d.errs == nil {
			d.errs = map[int]string{}
		}
		d.errs[i] = err.Error()
		d.mu.Unlock()
	}
	return err
}

// CacheBytes passes on the cache bound of a dataset that has one.
func (d *recordingDataset) CacheBytes() int64 {
	if c, ok := d.Dataset.(data.Cacher); ok {
		return c.CacheBytes()
	}
	return 0
}

// failures are the samples that failed to load, in dataset order.
func (d *recordingDataset) failures() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	idx := make([]int, 0, len(d.errs))
	for i := range d.errs {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = d.errs[i]
	}
	return out
}

func weightNames(m *artifacts.Manifest) []string {
	var names []string
	for _, group := range [][]artifacts.Tensor{m.Params, m.Frozen} {
		for _, t := range group {
			names = append(names, t.Name)
		}
	}
	for _, b := range m.Buffers {
		names = append(names, b.Name)
	}
	return names
}

func hostValue(t *data.Tensor) (*ort.Value, error) {
	shape := make([]int64, len(t.Shape))
	for i, d := range t.Shape {
		shape[i] = int64(d)
	}
	switch t.DType {
	case data.Float32:
		return ort.NewTensor(shape, t.F32)
	case data.Int64:
		return ort.NewTensor(shape, t.I64)
	case data.Uint8:
		return ort.NewTensor(shape, t.U8)
	}
	return nil, fmt.Errorf("tensor %s: element type %v", t.Name, t.DType)
}

// Table is the result as rows of name and value, for printing: the means,
// then each volume's PSNR, SSIM, MS-SSIM, MAE and MSE (SSIM and MS-SSIM
// "not computed" for a volume too small for them), six significant digits.
func (r *CheckpointResult) Table() [][]string {
	return r.table(func(x float64) string { return fmt.Sprintf("%.6g", x) })
}

// CSV is Table with every value at full precision, as metrics.csv holds it.
func (r *CheckpointResult) CSV() [][]string {
	return r.table(func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) })
}

func (r *CheckpointResult) table(format func(float64) string) [][]string {
	rows := [][]string{{"metric", "value"}}
	keys := make([]string, 0, len(r.Mean))
	for k := range r.Mean {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		rows = append(rows, []string{k, format(r.Mean[k])})
	}
	if len(r.Volumes) > 0 {
		// A mean no volume has: too small for the metric's windows.
		for _, k := range []string{"ssim", "ms_ssim"} {
			if _, ok := r.Mean[k]; !ok {
				rows = append(rows, []string{k, "not computed"})
			}
		}
	}
	for _, v := range r.Volumes {
		base := v.Label()
		opt := func(x *float64) string {
			if x == nil {
				return "not computed"
			}
			return format(*x)
		}
		rows = append(rows,
			[]string{base + "/psnr", format(v.PSNR)},
			[]string{base + "/ssim", opt(v.SSIM)},
			[]string{base + "/ms_ssim", opt(v.MSSSIM)},
			[]string{base + "/mae", format(v.MAE)},
			[]string{base + "/mse", format(v.MSE)})
	}
	return rows
}
