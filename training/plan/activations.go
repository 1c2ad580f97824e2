package plan

import (
	"fmt"
	"os"
	"slices"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/setup"
	"github.com/ortrain/ortrain/training/trainer"
)

// Activations is a training step's device memory at the per-device batch,
// replayed at graph level in ONNX Runtime's execution order (memplan):
// what a step holds beside the training state. Kernel workspaces and the
// allocator's rounding come on top (Probe measures them).
type Activations struct {
	Batch     int64  `json:"batch"`
	Recompute string `json:"recompute"`
	// PeakBytes is the intermediate values live at the step's peak: the
	// training graph's, or the optimizer graph's where that is larger (on
	// the CPU, where they share an arena; on a GPU, each arena holding its
	// own, their sum); PerSample is PeakBytes / Batch.
	PeakBytes int64 `json:"peak_bytes"`
	// OptimizerBytes is the optimizer graph's part: its peak, which does
	// not grow with the batch.
	OptimizerBytes int64 `json:"optimizer_bytes"`
	PerSample      int64 `json:"per_sample_bytes"`
	// InputBytes is the batch, twice: the trainer loads the next one
	// beside the one a step reads. StateBytes is the training state as the
	// engine allocates it (parameters, accumulators, optimizer states,
	// buffers).
	InputBytes int64 `json:"input_bytes"`
	StateBytes int64 `json:"state_bytes"`
	// TotalBytes adds them up.
	TotalBytes int64 `json:"total_bytes"`
	// Emulated says the mixed-precision products were emulated where the
	// plan was made (no low-precision kernels on the CPU): the replay then
	// holds them in float32 with rounding copies, more than a GPU with
	// bfloat16/float16 kernels holds; a float32 plan is the closer figure.
	Emulated bool `json:"emulated,omitempty"`
	// DeviceTypedBytes is, for an emulated plan of a GPU run, the replay
	// of the graph as the GPU's low-precision kernels type it (low values
	// in 2 bytes, no rounding copies): the estimate of the GPU's peak, which
	// PeakBytes bounds from above.
	DeviceTypedBytes int64 `json:"device_typed_peak_bytes,omitempty"`
	// Probe is the step measured on this machine (plan --probe); nil
	// without.
	Probe *Probe `json:"probe,omitempty"`
	// Fit is the largest batch a device's memory holds (plan
	// --gpu-memory); nil without.
	Fit *Fit `json:"fit,omitempty"`
	// Sizes lists the training graph's tensors at the batch that have more
	// elements than ONNX Runtime's CUDA kernels take, and what to change.
	Sizes *setup.SizeCheck `json:"sizes"`

	shared bool // the graphs share an arena (see PeakBytes)
}

// Fit is the largest per-device batch whose step memory (activations as
// replayed, calibrated by the probe when there is one, + batch + training
// state) stays within a device's memory.
type Fit struct {
	DeviceBytes int64  `json:"device_bytes"`
	Device      string `json:"device"` // where DeviceBytes came from
	// Batch is 0 when not even one sample fits; TotalBytes is the step
	// memory at Batch (at 1 when none fits).
	Batch      int64 `json:"batch"`
	TotalBytes int64 `json:"total_bytes"`
}

// MemoryOptions say what MeasureActivations does beside the replay.
type MemoryOptions struct {
	// ProbeBatch > 0 runs a step at that batch and calibrates the replay
	// with it (see Probe).
	ProbeBatch int
	// DeviceBytes > 0 looks for the largest batch that fits in that much
	// memory (see Fit), which Device names.
	DeviceBytes int64
	Device      string
}

// maxFitBatch bounds the search for a fitting batch.
const maxFitBatch = 1 << 16

// Probe is a training step run at a small batch on this machine's CPU and
// measured by ONNX Runtime's allocator (trainer.ProbeMemory): the step's
// peak with what the replay leaves out (kernel scratch, the allocator's
// rounding) or counts that the run does not hold. The replay keeps what
// grows with the batch and where the peak moves; a measurement below the
// replay at the probe's batch is an over-count it carries at every batch,
// taken off, and one above it is a floor (scratch that does not grow with
// the batch: a small batch's step can peak in the optimizer's kernels),
// which a larger batch's replay may pass. Measured on this machine's
// three bench models at two batches each, the floor predicted the diffusion
// LM's larger batch within 3 % where adding the excess to its replay was
// 15 % over.
type Probe struct {
	Step trainer.MemoryProbe `json:"step"`
	// Replayed is the graph-level peak at the probe's batch.
	Replayed int64 `json:"replayed_bytes"`
	// PeakBytes is the calibrated peak at the plan's batch (Calibrate).
	PeakBytes int64 `json:"peak_bytes"`
}

// Calibrate returns the probe's estimate for a replayed peak.
func (p *Probe) Calibrate(replayed int64) int64 {
	if over := p.Replayed - p.Step.StepPeak; over > 0 {
		return max(replayed-over, 0)
	}
	return max(replayed, p.Step.StepPeak)
}

// MeasureActivations builds c's artifacts in a temporary directory, which
// it removes, and replays a training step at the per-device batch size.
// session is where precision kernels are probed (the CPU: plan needs no
// GPU; a bfloat16 product is then emulated, which holds the same values).
//
// What else it does, o says.
func (p *Plan) MeasureActivations(c *config.Config, session ort.Options, o MemoryOptions) error {
	tmp, err := os.MkdirTemp("", "ortrain-plan-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// The plan's device is the run's, not session's (plans are made on
	// the CPU): the graphs share an arena on the CPU, and setup builds a
	// GPU run's graphs in CUDA's forms.
	dev, err := ort.ParseDevice(c.Trainer.Device)
	shared := err != nil || !dev.CUDA
	dir, m, err := setup.Artifacts(c, tmp, session)
	if err != nil {
		return err
	}
	batch := int64(c.Data.BatchSize)
	r, err := artifacts.Memory(dir, batch)
	if err != nil {
		return err
	}
	peak := r.StepPeak(shared)
	a := &Activations{Batch: batch, Recompute: c.Model.Recompute, PeakBytes: peak, PerSample: peak / max(batch, 1), OptimizerBytes: r.Optimizer,
		InputBytes: 2 * r.Inputs, StateBytes: r.State, Emulated: m.Precision.EmulatedNodes > 0, shared: shared}
	if a.Recompute == "" {
		a.Recompute = "cheap"
	}
	a.TotalBytes = a.PeakBytes + a.InputBytes + a.StateBytes
	if a.Emulated && !shared {
		if a.DeviceTypedBytes, err = deviceTypedPeak(dir, m, batch, shared); err != nil {
			return err
		}
	}
	p.Activations = a
	if a.Sizes, err = setup.CheckSizes(c, dir); err != nil {
		return err
	}
	p.sizes(c, a.Sizes)
	p.Notes = slices.DeleteFunc(p.Notes, func(n string) bool { return n == stateOnlyNote || n == sizesNote })
	if probeBatch := o.ProbeBatch; probeBatch > 0 {
		if err := a.probe(dir, session, probeBatch); err != nil {
			return err
		}
	}
	if o.DeviceBytes > 0 {
		return a.fit(dir, o.DeviceBytes, o.Device)
	}
	return nil
}

// sizes says what train would do with tensors over CUDA's limit: refuse
// on a CUDA device, and on "auto" where ONNX Runtime has CUDA; the CPU
// takes them.
func (p *Plan) sizes(c *config.Config, s *setup.SizeCheck) {
	if len(s.Over) == 0 {
		return
	}
	dev, err := ort.ParseDevice(c.Trainer.Device)
	switch {
	case err == nil && dev.CUDA:
		p.Refusals = append(p.Refusals, s.Err().Error())
	case c.Trainer.Device == "auto":
		p.Warnings = append(p.Warnings, "on a GPU (trainer.device = \"auto\" where ONNX Runtime has CUDA) train would refuse this: "+s.Err().Error())
	default:
		p.Notes = append(p.Notes, fmt.Sprintf("on the CPU, which takes them, the training graph at batch %d has tensors of more than 2^31 − 1 elements, which a CUDA device would refuse: %s", s.Batch, s.Describe()))
	}
}

// probe runs a step at probeBatch and calibrates a with it.
func (a *Activations) probe(dir string, session ort.Options, probeBatch int) error {
	step, ok, err := trainer.ProbeMemory(dir, session, probeBatch)
	if err != nil {
		return fmt.Errorf("memory probe at batch %d: %w", probeBatch, err)
	}
	if !ok {
		return fmt.Errorf("memory probe: ONNX Runtime's allocator on %v keeps no statistics", session.Device)
	}
	at, err := artifacts.Memory(dir, int64(probeBatch))
	if err != nil {
		return err
	}
	pr := &Probe{Step: step, Replayed: at.StepPeak(a.shared)}
	pr.PeakBytes = pr.Calibrate(a.PeakBytes)
	a.Probe = pr
	return nil
}

// fit finds the largest batch whose step memory stays within deviceBytes:
// doubling, then bisecting, replaying the graph at each size tried.
func (a *Activations) fit(dir string, deviceBytes int64, device string) error {
	total := map[int64]int64{}
	at := func(b int64) (int64, error) {
		if t, ok := total[b]; ok {
			return t, nil
		}
		r, err := artifacts.Memory(dir, b)
		if err != nil {
			return 0, err
		}
		peak := r.StepPeak(a.shared)
		if a.Probe != nil {
			peak = a.Probe.Calibrate(peak)
		}
		total[b] = peak + 2*r.Inputs + a.StateBytes // two batches, as InputBytes
		return total[b], nil
	}
	f := &Fit{DeviceBytes: deviceBytes, Device: device}
	a.Fit = f
	t, err := at(1)
	if err != nil || t > deviceBytes {
		f.TotalBytes = t
		return err
	}
	lo, hi := int64(1), int64(2) // lo fits; hi is unknown
	for hi <= maxFitBatch {
		if t, err = at(hi); err != nil {
			return err
		}
		if t > deviceBytes {
			break
		}
		lo, hi = hi, 2*hi
	}
	if hi > maxFitBatch {
		hi = maxFitBatch + 1
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if t, err = at(mid); err != nil {
			return err
		}
		if t <= deviceBytes {
			lo = mid
		} else {
			hi = mid
		}
	}
	f.Batch, f.TotalBytes = lo, total[lo]
	return nil
}
