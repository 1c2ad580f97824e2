// Package trainer is ortrain's training loop: it trains an artifact set
// (training, eval and optimizer graphs; see training/artifacts/SPEC.md) on
// one device with the weights, gradient accumulators, optimizer state and
// buffers resident in device memory for the whole run.
//
// A step copies the batch into preallocated host tensors that stay bound to
// the graphs, runs the training graph once per micro-batch and the optimizer
// graph once per accumulation window, and reads two scalars back (loss and
// gradient norm). Every graph output X.out is written into the spare one of
// two device buffers and a parity bit flips instead of a copy; the IO
// bindings for every parity combination are prepared once, so a step in
// steady state makes no host↔device copies of state and no Go allocations.
// Because Binding.Run waits for its outputs anyway, reading the loss every
// step adds no synchronisation beyond the one ONNX Runtime already does.
//
// The loop itself is Run; checkpoints, metrics, early stopping and the
// progress display hang off it as callbacks (package callback).
package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ortrain/ortrain/metrics"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/callback"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/collective"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/logging"
	"github.com/ortrain/ortrain/training/precision"
	"github.com/ortrain/ortrain/training/rundir"
	"github.com/ortrain/ortrain/training/schedule"
	"github.com/ortrain/ortrain/training/setup"
	"github.com/ortrain/ortrain/training/telemetry"
	"github.com/ortrain/ortrain/training/validation"
)

// Options configure a Trainer.
type Options struct {
	// Config is the resolved run configuration.
	Config *config.Config
	// Artifacts is the artifact directory to train.
	Artifacts string
	// Session places the graphs (device and provider options), usually from
	// Config.SessionOptions.
	Session ort.Options
	// Train and Val are the datasets; Val nil means no validation.
	Train, Val data.Dataset
	// Dir is the run directory: checkpoints, metrics.csv, TensorBoard events.
	Dir *rundir.Dir
	// Resume is a checkpoint directory to continue from; "" starts afresh.
	Resume string
	// Progress receives the progress bar or lines; nil shows none.
	Progress *os.File
	// Callbacks run after the standard ones (metrics, checkpoints, early
	// stopping, progress).
	Callbacks []callback.Callback
	// Comm joins a data-parallel run (nil: one process): this rank trains
	// on its shard of every batch position, gradients are summed across
	// the ranks before each update, and only rank 0 logs, shows progress
	// and writes checkpoints (Dir may be nil on the others).
	Comm *collective.Comm
}

// Trainer runs one training run. It is not safe for concurrent use.
type Trainer struct {
	cfg       *config.Config
	eng       *engine
	train     *data.Loader
	val       *data.Loader
	sched     schedule.Schedule
	scaler    *precision.LossScaler // float16 training only
	callbacks callback.List
	ckpt      *callback.Checkpointer
	telemetry *telemetry.Sampler

	state       callback.State
	updates     int64       // optimizer updates applied (skipped steps excluded)
	skipsInARow int         // steps skipped since the last applied one, float16 overflows excluded
	overflows   overflowRun // float16 overflows since the last applied step
	skippedBad  int64       // bad samples the loader dropped (data.skip_bad_files)
	cursor      data.Cursor // where the train loader resumes after the last step
	accum       int
	terms       []float64 // StepResult.Terms, reused
	comm        *collective.Comm
	dcomm       *collective.DeviceComm // NCCL, for gradients on a GPU
	valShards   bool                   // each rank validates its shard (see New)
	valPad      int                    // with valShards: the dataset index this rank's shard repeats at its end, or -1
	reduce      []float64              // the step's scalars summed across ranks, reused
	bucket      []float32              // gradients packed for one sum (sumGradients)
	pending     [][]float32            // the gradients in bucket, in order
	clip        float64
	valEvery    int64
	tokens      int64  // tokens per sample for token models, else 0
	lastGood    string // newest checkpoint known whole
	configHash  string
	configTOML  string
	modelHash   string   // checkpoint.State.ModelHash
	classes     []string // the training set's class folders, when it has them

	// ahead loads the next training micro-batch into the spare slot while
	// the current one runs.
	ahead aheadLoader

	// changeSeen: an update at lr > 0 was seen to change the weights
	// (checked once, at the first such update of the process).
	changeSeen bool
	// afterMicroBatch, when set (tests), is called after each micro-batch's
	// training run with the step (1-based) and the micro-batch's index.
	afterMicroBatch func(step int64, k int)
}

// schedState is what a checkpoint stores for the schedule: the schedule
// itself, so a resumed run keeps its LR curve even when max_steps changes,
// and the count of applied updates (AdamW's bias-correction step).
type schedState struct {
	Schedule schedule.Schedule `json:"schedule"`
	Updates  int64             `json:"updates"`
}

// New loads the artifacts onto the device, sets up the loaders, the
// schedule and the standard callbacks, and restores Options.Resume if given.
func New(o Options) (t *Trainer, err error) {
	c := o.Config
	if err := checkCompatible(c); err != nil {
		return nil, err
	}
	m, err := artifacts.Load(o.Artifacts)
	if err != nil {
		return nil, fmt.Errorf("model artifacts %s: %w", o.Artifacts, err)
	}
	if err := setup.AdoptOptimizer(c, m); err != nil {
		return nil, err
	}
	t = &Trainer{cfg: c, accum: c.Trainer.AccumulateGradBatches, clip: c.Trainer.GradientClipVal, lastGood: o.Resume, comm: o.Comm}
	world := 1
	if o.Comm != nil {
		world = o.Comm.Size()
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.eng, err = openEngine(o.Artifacts, m, o.Session, c.Data.Feeds); err != nil {
		return t, err
	}
	if err := t.eng.train.PinnedErr(); err != nil && o.Progress != nil {
		fmt.Fprintf(o.Progress, "ortrain: each step's inputs are copied to the GPU from pageable host memory, more slowly than from pinned: %v\n", err)
	}
	// GPU ranks sum gradients with NCCL on the device; the comm joins
	// after ONNX Runtime has made the GPU's context current.
	if o.Comm != nil && o.Session.Device.CUDA {
		if t.dcomm, err = collective.NewDeviceComm(o.Comm, o.Session.Device.ID); err != nil {
			return t, err
		}
	}
	if c.Model.InitWeights != "" && o.Resume == "" {
		msg, err := t.eng.initWeights(c.Model.InitWeights, c.Model.Strict())
		if err != nil {
			return t, err
		}
		if o.Progress != nil {
			fmt.Fprintln(o.Progress, "ortrain: "+msg)
		}
	}
	// A data-parallel run validates a shard on each rank and sums the
	// totals, where every metric adds up (validation.Metrics.Shardable).
	t.valShards = o.Comm != nil && validation.New(m, c).Shardable()
	if cn, ok := o.Train.(interface{ ClassNames() []string }); ok {
		t.classes = cn.ClassNames()
	}
	if t.train, t.val, err = loaders(c, o.Train, o.Val, o.Comm, t.valShards); err != nil {
		return t, err
	}
	if err := checkMonitor(c, m, t.val != nil); err != nil {
		return t, err
	}
	t.valPad = -1
	if t.valShards && t.val != nil {
		t.valPad = paddedIndex(o.Val.Len(), o.Comm.Rank(), o.Comm.Size())
	}
	if o.Comm != nil && o.Comm.Rank() == 0 && o.Progress != nil {
		if msg := unevenShards(c, o.Train, o.Val, o.Comm.Size(), t.valShards); msg != "" {
			fmt.Fprintln(o.Progress, "ortrain: "+msg)
		}
	}
	stepsPerEpoch := max(1, int64(t.train.BatchesPerEpoch()/t.accum))
	maxSteps := c.Trainer.MaxSteps
	if e := c.Trainer.MaxEpochs; e > 0 && (maxSteps == 0 || int64(e)*stepsPerEpoch < maxSteps) {
		maxSteps = int64(e) * stepsPerEpoch
	}
	t.state = callback.State{MaxSteps: maxSteps, StepsPerEpoch: stepsPerEpoch}
	if t.val != nil {
		t.valEvery = c.Trainer.ValCheckInterval.StepsIn(stepsPerEpoch)
	}
	if c.Data.Kind == config.KindTokens {
		t.tokens = int64(c.Data.Tokens.SeqLen)
	}
	if o.Comm != nil {
		if err := t.agreeAcrossRanks(o.Comm, c, o.Train, o.Val); err != nil {
			return t, err
		}
	}
	if t.sched, err = schedule.FromConfig(c, maxSteps, world); err != nil {
		return t, err
	}
	if m.LossScaleInput != "" {
		t.scaler = precision.NewLossScaler(c.Trainer.LossScaleInit, c.Trainer.LossScaleGrowthInterval)
	}
	if t.configHash, err = c.Hash(); err != nil {
		return t, err
	}
	toml, err := c.Encode()
	if err != nil {
		return t, err
	}
	t.configTOML = string(toml)
	if c.Model.ONNX != "" && o.Resume == "" {
		// A resume keeps the hash its checkpoint recorded (restore).
		if t.modelHash, err = graph.StructureHash(c.Model.ONNX); err != nil {
			return t, err
		}
	}
	if o.Session.Device.CUDA {
		t.telemetry = telemetry.Start(o.Session.Device.ID, time.Second)
	}
	// Every check of the checkpoint passes before the callbacks open the
	// run's files: a refused resume writes nothing (no events file, no
	// metrics.csv cut at the checkpoint).
	var cbState map[string]json.RawMessage
	if o.Resume != "" {
		if cbState, err = t.restore(o.Resume, o.Progress); err != nil {
			return t, err
		}
	}
	if err := t.setupCallbacks(o); err != nil {
		return t, err
	}
	if o.Resume != "" {
		if err := t.callbacks.Restore(cbState); err != nil {
			return t, err
		}
	}
	return t, nil
}

// Run trains until max_steps (or max_epochs), early stopping, an error, or
// ctx is cancelled. Cancellation (the CLI's first SIGINT/SIGTERM) finishes
// the current step and ends normally, so the final checkpoint is written.
func (t *Trainer) Run(ctx context.Context) (err error) {
	s := &t.state
	// No step since the start (a fresh run's step 0, or a resume's
	// checkpoint step) means nothing new to save: the checkpointer writes
	// none, and the stop reason must not claim one.
	start := s.Step
	written := func() string {
		if s.Step > start {
			return "checkpoint written"
		}
		if start == 0 {
			return "no checkpoint written: no step was taken"
		}
		return fmt.Sprintf("no new checkpoint: no step was taken since the resumed step %d", start)
	}
	if !t.changeSeen {
		// The first update's check, ready before the steps are timed.
		if err = t.eng.prepareWeightChange(); err != nil {
			return err
		}
	}
	if err = t.callbacks.OnTrainStart(s); err == nil {
		for !s.ShouldStop {
			if s.Step >= s.MaxSteps {
				s.StopReason = fmt.Sprintf("reached %d steps", s.MaxSteps)
				if e := t.cfg.Trainer.MaxEpochs; e > 0 && s.MaxSteps == int64(e)*s.StepsPerEpoch {
					s.StopReason = fmt.Sprintf("reached %d epochs (%d steps)", e, s.MaxSteps)
				}
				if o := t.overflows; o.n > 0 {
					// A run too short for the scaler to settle says so.
					which := fmt.Sprintf("its last %d steps were", o.n)
					if int64(o.n) >= s.Step {
						which = fmt.Sprintf("all %d steps were", o.n)
					}
					s.StopReason += fmt.Sprintf("; %s skipped for float16 overflow, the loss scale backing off from %g to %g (trainer.loss_scale_init = %g): lower trainer.loss_scale_init, or train longer",
						which, o.from, o.to, t.initScale())
				}
				break
			}
			stop := ctx.Err() != nil
			if t.comm != nil && err == nil {
				// Every rank stops at the same step: a signal reaching one
				// rank stops them all.
				if stop, err = t.anyRank(stop); err != nil {
					break
				}
			}
			if stop {
				s.StopReason = "interrupted; " + written()
				break
			}
			var r callback.StepResult
			if r, err = t.step(ctx); err != nil {
				if errors.Is(err, errStepAbandoned) {
					err = nil
					s.StopReason = "interrupted during a step, whose micro-batches were dropped; " + written()
				}
				break
			}
			if t.valEvery > 0 && s.Step%t.valEvery == 0 {
				if err = t.validate(); err != nil {
					break
				}
			}
			if err = t.callbacks.OnStepEnd(s, r); err != nil {
				break
			}
		}
	}
	if err == nil && t.comm != nil && len(t.eng.buffers) > 0 {
		err = t.buffersAgree()
	}
	// A batch that does not load (a corrupt image, a truncated volume)
	// fails before the step's update: the steps done are whole, and are
	// checkpointed as the end of the run, at the data position where that
	// step began (for validation data, after the step validated).
	var de *DataError
	if errors.As(err, &de) {
		t.cursor = de.cursor
		s.StopReason = fmt.Sprintf("stopped on bad %s data; %s", de.what(), written())
	}
	s.Failed = err != nil && de == nil
	end := t.callbacks.OnTrainEnd(s)
	if err != nil && end != nil && end.Error() == err.Error() {
		end = nil // a logger's Close repeats the write error the run stopped on
	}
	err = errors.Join(err, end)
	if errors.Is(err, syscall.ENOSPC) {
		where := "no checkpoint of this run was saved"
		if ck := t.lastCheckpoint(); ck != "" {
			where = "the newest whole checkpoint is " + ck + "; free space, then continue with --resume " + ck
		}
		err = fmt.Errorf("%w (the disk is full: %s)", err, where)
	}
	return err
}

func (e DisagreeError) Error() string  { return e.Err.Error() }
func (e DisagreeError) Unwrap() error  { return e.Err }
func (e DisagreeError) BadInput() bool { return true }

// EveryRank says that every rank returns the error.
func (DisagreeError) EveryRank() bool { return true }

// bucketFloats bounds the gradients summed in one call (25 MiB, the
// bucket PyTorch's DDP uses): many small tensors go in few calls.
const bucketFloats = 25 << 20 / 4

// DataError is a training or validation batch that could not be loaded;
// the message names the file. It is the user's to fix (exit 2), and the
// run ends with a checkpoint of the steps done.
type DataError struct {
	Err        error
	Validation bool
	cursor     data.Cursor // where training resumes
}

func (e *DataError) what() string {
	if e.Validation {
		return "validation"
	}
	return "training"
}

func (e *DataError) Error() string  { return e.what() + " data: " + e.Err.Error() }
func (e *DataError) Unwrap() error  { return e.Err }
func (e *DataError) BadInput() bool { return true }

// errStepAbandoned: a stop was requested between the micro-batches of a
// step, which was dropped before its update.
var errStepAbandoned = errors.New("step abandoned")

// step runs one optimizer step: accumulate micro-batches, then update. A
// stop requested through ctx between micro-batches (a step of many can
// take hours) drops the step: the buffers and the data position go back
// to where it began, so the run checkpoints and resumes as if it had
// stopped before it. Ranks of a data-parallel run stop between steps,
// where they agree.
func (t *Trainer) step(ctx context.Context) (callback.StepResult, error) {
	start := time.Now()
	t.eng.ortTime = 0
	r := callback.StepResult{GradNorm: math.NaN(), LR: t.sched.LR(t.state.Step)}
	gradScale := 1 / float64(t.accum)
	if t.scaler != nil {
		t.eng.lossScale[0] = float32(t.scaler.Scale)
		gradScale /= t.scaler.Scale
		r.Metrics = map[string]float64{"train/loss_scale": t.scaler.Scale}
	}
	ok := true
	begin := t.cursor
	if t.terms == nil {
		t.terms = make([]float64, len(t.eng.termNames))
	}
	clear(t.terms)
	r.TermNames, r.Terms = t.eng.termNames, t.terms
	epoch := t.cursor.Epoch
	abandonable := t.accum > 1 && t.comm == nil
	if abandonable {
		if err := t.eng.keepBuffers(); err != nil {
			return r, err
		}
	}
	for k := range t.accum {
		if k > 0 && abandonable && ctx.Err() != nil {
			if err := t.eng.restoreBuffers(); err != nil {
				return r, err
			}
			t.cursor = begin
			return r, errStepAbandoned
		}
		a, blocked := t.takeAhead()
		if a.loadErr != nil {
			return r, &DataError{Err: a.loadErr, cursor: begin}
		}
		if a.err != nil {
			return r, a.err
		}
		if err := t.eng.trainData.bind(a.slot, t.eng.allTrain); err != nil {
			return r, err
		}
		// The next micro-batch loads while this one runs.
		t.fetchAhead(1 - a.slot)
		epoch = a.epoch
		loss, err := t.eng.forward(k == 0, t.state.Step)
		if err != nil {
			return r, err
		}
		if t.afterMicroBatch != nil {
			t.afterMicroBatch(t.state.Step+1, k)
		}
		r.Loss += loss / float64(t.accum)
		for i, v := range t.eng.terms {
			t.terms[i] += float64(v[0]) / float64(t.accum)
		}
		r.Samples += int64(a.rows)
		r.Tokens += a.tokens
		r.Positions += int64(a.rows) * t.tokens
		// Waiting for the loader counts as data wait as far as it was not
		// hidden behind the run before; the rest of the time blocked was
		// the staging's.
		r.DataWait += min(blocked, a.wait)
		if a.skipped > 0 {
			t.skippedBad += int64(a.skipped)
		}
		ok = ok && finite(loss)
		t.cursor = a.cursor
	}
	if t.comm != nil {
		var err error
		if ok, err = t.allReduce(&r, ok); err != nil {
			return r, err
		}
		gradScale /= float64(t.comm.Size())
		if err := t.syncBuffers(); err != nil {
			return r, err
		}
	}
	overflow := false
	if ok {
		gn, applied, err := t.eng.update(r.LR, t.updates+1, gradScale, t.clip)
		if err != nil {
			return r, err
		}
		r.GradNorm, ok = gn, applied
		if t.scaler != nil {
			// Scaled float16 gradients that overflow are the scaler's to
			// handle: skip the step, halve the scale.
			scale := t.scaler.Scale
			overflow = !t.scaler.Update(applied)
			r.Metrics["train/overflow_skipped"] = float64(t.scaler.Skipped)
			if overflow {
				if t.overflows.n == 0 {
					t.overflows.from = scale
				}
				t.overflows.n++
				t.overflows.to = scale
			}
		}
	}
	weights := !ok && finite(r.Loss) && finite(r.GradNorm)
	if !ok && !overflow && !t.cfg.Trainer.SkipNonfinite {
		return r, &NonFiniteError{Step: t.state.Step + 1, Loss: r.Loss, GradNorm: r.GradNorm, Weights: weights, LastCheckpoint: t.lastCheckpoint()}
	}
	switch {
	case ok:
		if !t.changeSeen && r.LR > 0 {
			change, err := t.eng.weightChange()
			if err != nil {
				return r, err
			}
			if change == 0 {
				return r, &StillWeightsError{Step: t.state.Step + 1, LR: r.LR, GradNorm: r.GradNorm, Device: t.eng.train.Device()}
			}
			t.changeSeen = true
		}
		t.updates++
		t.skipsInARow = 0
		t.overflows = overflowRun{}
	case overflow:
		// The scaler backing off from too large a scale (GradScaler's
		// first steps from a high loss_scale_init) is not a run that no
		// longer learns: only overflows down at the scale's floor are.
		if t.scaler.AtFloor() {
			return r, &NonFiniteError{Step: t.state.Step + 1, Loss: r.Loss, GradNorm: r.GradNorm, InARow: t.overflows.n,
				Overflow: &t.overflows, InitScale: t.initScale(), LastCheckpoint: t.lastCheckpoint()}
		}
	default:
		if t.skipsInARow++; t.skipsInARow >= maxSkipsInARow || int64(t.skipsInARow) == t.state.MaxSteps {
			return r, &NonFiniteError{Step: t.state.Step + 1, Loss: r.Loss, GradNorm: r.GradNorm, Weights: weights, InARow: t.skipsInARow,
				LastCheckpoint: t.lastCheckpoint()}
		}
	}
	r.Skipped = !ok
	if t.cfg.Data.SkipBadFiles {
		if r.Metrics == nil {
			r.Metrics = map[string]float64{}
		}
		r.Metrics["data/skipped_samples"] = float64(t.skippedBad)
	}
	t.state.Step++
	// The epoch the step's samples came from: the cursor has moved on to
	// the next one after an epoch's last batch.
	t.state.Epoch = int64(epoch)
	r.Duration = time.Since(start)
	r.RunTime = t.eng.ortTime // reset when the step began
	return r, nil
}

// validate runs the eval graph over the validation set (or its first
// limit_val_batches batches) and reports val/loss, the sample-weighted
// mean; for a classifier val/top1 and val/top5; for a language model
// (a loss per predicted token) val/nll per token and val/ppl.
func (t *Trainer) validate() error {
	if err := t.val.Resume(data.Cursor{}); err != nil {
		return err
	}
	n := t.val.BatchesPerEpoch()
	if lim := t.cfg.Trainer.LimitValBatches; lim > 0 && lim < n {
		n = lim
	}
	vm := validation.New(t.eng.m, t.cfg)
	skipped := []float64{0}
	for k := range n {
		b, err := t.val.Next()
		if err != nil {
			return &DataError{Err: err, Validation: true, cursor: t.cursor}
		}
		if b.Epoch() != 0 {
			// Batches of bad files were dropped whole: the set is done.
			skipped[0] += float64(b.SkippedBefore)
			break
		}
		skipped[0] += float64(b.Skipped)
		// The sample that pads this rank's shard is counted by the rank
		// whose it is: the job's metrics are each sample once, at any
		// world size.
		if t.valPad >= 0 && k == t.val.BatchesPerEpoch()-1 && dropLastRow(b, t.valPad) {
			continue
		}
		rows, err := t.eng.evalData.load(b, t.eng.allEval)
		if err != nil {
			return err
		}
		loss, err := t.eng.evaluate()
		if err != nil {
			return err
		}
		outs, err := t.eng.evalOutputs()
		if err != nil {
			return err
		}
		err = vm.Add(b, rows, loss, outs)
		for _, o := range outs {
			o.Close()
		}
		if err != nil {
			return fmt.Errorf("validation: %w", err)
		}
	}
	if t.valShards {
		if err := vm.Reduce(t.comm.SumFloat64); err != nil {
			return err
		}
		if err := t.comm.SumFloat64(skipped); err != nil {
			return err
		}
	}
	out := map[string]float64{}
	vm.Report(out)
	if t.cfg.Data.SkipBadFiles {
		// The metrics above are over fewer samples than the set holds.
		out["val/skipped_samples"] = skipped[0]
	}
	return t.callbacks.OnValidationEnd(&t.state, out)
}

// dropLastRow removes the batch's last row when it is dataset sample idx
// (the loader's buffers are resized on their next fill); it reports
// whether the batch is then empty.
func dropLastRow(b *data.Batch, idx int) bool {
	rows := len(b.Indices)
	if rows == 0 || b.Indices[rows-1] != idx {
		return rows == 0
	}
	for _, x := range b.Tensors {
		if len(x.Shape) == 0 || x.Shape[0] != rows {
			continue
		}
		keep := x.Len() / rows * (rows - 1)
		switch x.DType {
		case data.Float32:
			x.F32 = x.F32[:keep]
		case data.Int64:
			x.I64 = x.I64[:keep]
		case data.Uint8:
			x.U8 = x.U8[:keep]
		}
		x.Shape[0] = rows - 1
	}
	b.Indices = b.Indices[:rows-1]
	return rows == 1
}

// Snapshot implements callback.Snapshotter: the device state streamed to
// host bytes, and the loop's position.
func (t *Trainer) Snapshot(*callback.State) (*checkpoint.State, []checkpoint.Tensor, error) {
	cur, err := json.Marshal(t.cursor)
	if err != nil {
		return nil, nil, err
	}
	sch, err := json.Marshal(schedState{t.sched, t.updates})
	if err != nil {
		return nil, nil, err
	}
	cbs, err := t.callbacks.State()
	if err != nil {
		return nil, nil, err
	}
	st := &checkpoint.State{Loader: cur, Scheduler: sch, Callbacks: cbs, Monitor: t.cfg.Trainer.Monitor,
		ConfigHash: t.configHash, Config: t.configTOML, ModelHash: t.modelHash, Version: artifacts.Version, Classes: t.classes}
	if t.scaler != nil {
		if st.LossScaler, err = json.Marshal(t.scaler); err != nil {
			return nil, nil, err
		}
	}
	return st, t.eng.tensors(), nil
}

func (t *Trainer) lastCheckpoint() string {
	if t.ckpt != nil && t.ckpt.LastPath != "" {
		return t.ckpt.LastPath
	}
	return t.lastGood
}

// setupCallbacks builds the standard callbacks around the run directory.
func (t *Trainer) setupCallbacks(o Options) error {
	tc := t.cfg.Trainer
	if t.comm != nil && t.comm.Rank() != 0 {
		// Rank 0 writes for the job; early stopping decides alike on
		// every rank (each reports the job's validation).
		if tc.EarlyStoppingPatience > 0 {
			t.callbacks = append(t.callbacks, callback.NewEarlyStopping(tc.Monitor, tc.Mode, tc.EarlyStoppingPatience, tc.EarlyStoppingMinDelta))
		}
		t.callbacks = append(t.callbacks, o.Callbacks...)
		return nil
	}
	mgr, err := checkpoint.NewManager(o.Dir.Checkpoints(), tc.SaveTopK, tc.Monitor, tc.Mode)
	if err != nil {
		return err
	}
	resumeStep := int64(-1)
	if o.Resume != "" {
		resumeStep = t.state.Step // restored
		if aside := mgr.Resume(resumeStep); len(aside) > 0 && o.Progress != nil {
			fmt.Fprintf(o.Progress, "ortrain: %d checkpoints after step %d (the branch this resume leaves) stay on disk, out of top-k and \"last\": %s ...\n",
				len(aside), resumeStep, aside[0].Dir)
		}
	}
	csv, err := logging.OpenCSV(o.Dir.File(rundir.MetricsFile), resumeStep)
	if err != nil {
		return err
	}
	tb, err := logging.NewTensorBoard(o.Dir.Path)
	if err != nil {
		csv.Close()
		return err
	}
	if resumeStep >= 0 {
		if err := tb.Restart(resumeStep); err != nil {
			csv.Close()
			tb.Close()
			return err
		}
	}
	t.ckpt = callback.NewCheckpointer(mgr, t, tc.CheckpointEveryNSteps, tc.Monitor)
	t.callbacks = callback.List{callback.NewLogMetrics(logging.Multi(csv, tb), int64(tc.LogEveryNSteps), t.telemetry, memoryMetrics{t.eng}), t.ckpt}
	if tc.EarlyStoppingPatience > 0 {
		t.callbacks = append(t.callbacks, callback.NewEarlyStopping(tc.Monitor, tc.Mode, tc.EarlyStoppingPatience, tc.EarlyStoppingMinDelta))
	}
	if o.Progress != nil {
		t.callbacks = append(t.callbacks, callback.NewProgress(o.Progress, int64(tc.LogEveryNSteps)))
	}
	t.callbacks = append(t.callbacks, o.Callbacks...)
	return nil
}

// loaders makes the train loader (shuffled per the config) and, with a
// validation set, the val loader (in order).
func loaders(c *config.Config, train, val data.Dataset, comm *collective.Comm, valShards bool) (*data.Loader, *data.Loader, error) {
	if train == nil {
		return nil, nil, errors.New("trainer: no training dataset")
	}
	tc := setup.LoaderConfig(c, true)
	if comm != nil {
		// Each rank its shard of every epoch's order.
		tc.Rank, tc.WorldSize = comm.Rank(), comm.Size()
	}
	tl, err := data.New(train, tc)
	if err != nil {
		return nil, nil, fmt.Errorf("training data: %w", err)
	}
	if val == nil {
		return tl, nil, nil
	}
	vc := setup.LoaderConfig(c, false)
	if valShards {
		vc.Rank, vc.WorldSize = comm.Rank(), comm.Size()
	}
	vl, err := data.New(val, vc)
	if err != nil {
		tl.Close()
		return nil, nil, fmt.Errorf("validation data: %w", err)
	}
	return tl, vl, nil
}

// checkCompatible rejects settings the artifact graphs cannot honour.
func checkCompatible(c *config.Config) error {
	if c.Trainer.GradientClipVal > 0 && c.Trainer.GradientClipAlgorithm != "norm" {
		return &config.Error{Key: "trainer.gradient_clip_algorithm", Msg: fmt.Sprintf("%q: optimizer.onnx clips by global norm only; use \"norm\" or gradient_clip_val = 0", c.Trainer.GradientClipAlgorithm)}
	}
	return nil
}

// StillWeightsError stops a run whose first optimizer update at a
// learning rate above zero left every trainable weight as it was: steps
// that change nothing must not be logged as training.
type StillWeightsError struct {
	Step         int64 // the optimizer step, 1-based
	LR, GradNorm float64
	Device       ort.Device
}

func (e *StillWeightsError) Error() string {
	return fmt.Sprintf("step %d: the optimizer update at lr %g (gradient norm %g) changed no trainable weight on %v; stopped, since the run would not train. "+
		"A gradient norm of 0 means the loss does not depend on the weights (check model.loss and the data); otherwise the update did not take effect on %v, a fault of ortrain or of ONNX Runtime's provider (please report it with `ortrain doctor --device %v`)",
		e.Step, e.LR, e.GradNorm, e.Device, e.Device, e.Device)
}

// NonFiniteError stops a run whose loss or gradient norm is NaN or Inf
// (with trainer.skip_nonfinite = false). The update was not applied and no
// checkpoint was written after it.
type NonFiniteError struct {
	Step           int64 // the optimizer step that failed, 1-based
	Loss, GradNorm float64
	// Weights: the loss and gradients were finite, the new weights not.
	Weights bool
	// InARow is set when skip_nonfinite skipped this many steps in a row.
	InARow int
	// Overflow is set when float16 gradients overflowed at every loss
	// scale down to precision.MinScale; InitScale is the first scale.
	Overflow       *overflowRun
	InitScale      float64
	LastCheckpoint string // the newest whole checkpoint, "" if none
}

// overflowRun is a streak of float16 overflows: n steps skipped, at loss
// scales from `from` halving down to `to`.
type overflowRun struct {
	n        int
	from, to float64
}

// initScale is the float16 run's first loss scale.
func (t *Trainer) initScale() float64 {
	if v := t.cfg.Trainer.LossScaleInit; v > 0 {
		return v
	}
	return precision.DefaultInitScale
}

// Error says what was not finite and where to resume from.
func (e *NonFiniteError) Error() string {
	last := "no checkpoint was saved yet"
	if e.LastCheckpoint != "" {
		last = "the last good checkpoint is " + e.LastCheckpoint
	}
	what := fmt.Sprintf("loss %g, gradient norm %g: not finite", e.Loss, e.GradNorm)
	if e.Weights {
		what = fmt.Sprintf("loss %g and gradient norm %g are finite, but the update would make weights infinite or NaN", e.Loss, e.GradNorm)
	}
	if o := e.Overflow; o != nil {
		return fmt.Sprintf("step %d: float16 gradients overflowed at every loss scale from %g down to %g (%d steps in a row skipped; the last with loss %g); stopped (%s). "+
			"Below %g no loss scale helps (trainer.loss_scale_init = %g only sets where it starts): the gradients are not finite even unscaled; "+
			"lower optimizer.lr, set trainer.gradient_clip_val, check the data, or train in trainer.precision = \"bf16-mixed\"", e.Step, o.from, o.to, o.n, e.Loss, last, precision.MinScale, e.InitScale)
	}
	if e.InARow > 0 {
		return fmt.Sprintf("step %d: %d steps in a row skipped (the last: %s); stopped (%s). "+
			"The run no longer learns: lower optimizer.lr, set trainer.gradient_clip_val, or check the data", e.Step, e.InARow, what, last)
	}
	return fmt.Sprintf("step %d: %s; stopped without applying the update (%s). "+
		"Lower optimizer.lr, set trainer.gradient_clip_val, or set trainer.skip_nonfinite = true to skip such steps",
		e.Step, what, last)
}

// checkMonitor refuses a monitor validation never reports: top-k would
// keep the newest checkpoints and early stopping never fire, silently.
func checkMonitor(c *config.Config, m *artifacts.Manifest, validates bool) error {
	mon, validationMetrics := c.Trainer.Monitor, validation.Names(m)
	switch {
	case mon == "":
		return nil
	case !slices.Contains(validationMetrics, mon):
		why := ""
		if mon == metrics.ValSSIM && slices.Contains(validationMetrics, metrics.ValPSNR) {
			why = fmt.Sprintf("; SSIM needs one-channel patches of at least %d voxels on every axis", metrics.GaussianWindow)
		}
		return &config.Error{Key: "trainer.monitor", Msg: fmt.Sprintf("%q is not a metric this run computes at validation (%s)%s", mon, strings.Join(validationMetrics, ", "), why)}
	case !validates:
		return &config.Error{Key: "trainer.monitor", Msg: fmt.Sprintf("%q needs validation data (data.val, or a split of data.train), and this run has none", mon)}
	}
	return nil
}

// realTokens counts the tokens of a token batch that are not padding (its
// attention_mask), so that throughput/tokens_per_s is comparable with the
// users' own; rows × seqLen without a mask, 0 for other data.
func realTokens(b *data.Batch, rows int, seqLen int64) int64 {
	if seqLen == 0 {
		return 0
	}
	if m := b.Tensor("attention_mask"); m != nil && m.DType == data.Uint8 {
		n := int64(0)
		for _, v := range m.U8 {
			n += int64(v)
		}
		return n
	}
	return int64(rows) * seqLen
}

// maxSkipsInARow stops a run that skips every step (skip_nonfinite, or
// float16 overflow that halving the loss scale does not cure); a shorter
// run stops when it skipped every step it had.
const maxSkipsInARow = 100

// aheadBatch is a training micro-batch loaded into a slot of the training
// graph's stage (stage.fill), with what the step records of it: the batch
// itself goes back to the loader at its next Next.
type aheadBatch struct {
	slot    int
	rows    int
	tokens  int64 // realTokens
	epoch   int
	cursor  data.Cursor
	wait    time.Duration // in the loader
	skipped int
	loadErr error // the loader's (a DataError)
	err     error // the staging's
}

// aheadLoader takes the next batch from the training loader and stages it
// into a slot on a goroutine of its own, beside the training run that
// reads the other slot: on a GPU the batch's copies (to pinned memory, then
// to the device) overlap the step rather than precede it. The loader and
// the slot are the goroutine's from fetchAhead until takeAhead returns;
// the data position (Trainer.cursor) moves only when a step takes the
// batch, so a run that stops with a batch ahead checkpoints and resumes
// before it. One goroutine and two reused results: a step allocates
// nothing.
type aheadLoader struct {
	req     chan int
	done    chan *aheadBatch
	res     [2]aheadBatch
	pending bool
}

// fetchAhead starts loading the next batch into slot k.
func (t *Trainer) fetchAhead(k int) {
	al := &t.ahead
	if al.req == nil {
		al.req, al.done = make(chan int), make(chan *aheadBatch)
		go func() {
			for k := range al.req {
				a := &al.res[k]
				*a = aheadBatch{slot: k}
				if b, err := t.train.Next(); err != nil {
					a.loadErr = err
				} else if a.rows, a.err = t.eng.trainData.fill(k, b); a.err == nil {
					a.tokens = realTokens(b, a.rows, t.tokens)
					a.epoch, a.cursor, a.wait, a.skipped = b.Epoch(), b.Cursor, b.Wait, b.Skipped
				}
				al.done <- a
			}
		}()
	}
	al.req <- k
	al.pending = true
}

// takeAhead returns the batch loaded ahead, waiting for it (loading one
// now if none is), and how long it waited.
func (t *Trainer) takeAhead() (*aheadBatch, time.Duration) {
	if !t.ahead.pending {
		t.fetchAhead(max(t.eng.trainData.bound, 0))
	}
	start := time.Now()
	a := <-t.ahead.done
	t.ahead.pending = false
	return a, time.Since(start)
}

// Close releases the device state, the loaders and the telemetry sampler.
func (t *Trainer) Close() error {
	if t.ahead.pending {
		// Its goroutine uses the loader and the engine.
		<-t.ahead.done
		t.ahead.pending = false
	}
	if t.ahead.req != nil {
		close(t.ahead.req)
		t.ahead.req = nil
	}
	if t.train != nil {
		t.train.Close()
	}
	if t.val != nil {
		t.val.Close()
	}
	if t.dcomm != nil {
		t.dcomm.Close()
	}
	if t.eng != nil {
		t.eng.close()
	}
	t.telemetry.Stop()
	return nil
}
