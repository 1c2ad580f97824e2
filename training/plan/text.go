package plan

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
)

// WriteText writes the plan as a two-column table for people.
func (p *Plan) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }

	row("run", "%s → %s", p.Name, p.RunDir)
	row("device", "%s, precision %s", p.Device, p.Precision)
	row("arithmetic", "%s", p.Arithmetic)
	if c := p.CUDA; c != nil {
		row("cuda", "tf32 %s, cudnn_conv_algo_search %s, gpu_mem_limit %s, arena %s, cuda graph %s, nhwc %s, cpu fallback %s",
			onOff(c.UseTF32), c.ConvAlgoSearch, sizeOr(c.GPUMemLimit, "none"), c.ArenaExtendStrategy, onOff(c.EnableCUDAGraph), onOff(c.PreferNHWC), onOff(c.AllowCPUFallback))
	}
	m := p.Model
	row("model", "%s, %s parameters", m.Source, thousands(m.Params))
	if m.InitWeights != "" {
		row("initial weights", "%s", m.InitWeights)
	}
	a := p.Activations
	if a == nil {
		row("training state", "%s on the device: %d × 4 B × params (%s; every state tensor twice); activations not included: --memory replays a step",
			data.FormatBytes(m.StateBytes), m.StateCopies, m.Optimizer)
	} else {
		row("training state", "%s on the device: %d × 4 B × params (%s; every state tensor twice)",
			data.FormatBytes(m.StateBytes), m.StateCopies, m.Optimizer)
		row("step memory", "%s at batch %d (recompute %s): activations %s at the peak (%s per sample) + batch %s + training state %s; graph level, as ONNX Runtime's planner lays the values out; kernel scratch and the allocator's rounding on top",
			data.FormatBytes(a.TotalBytes), a.Batch, a.Recompute, data.FormatBytes(a.PeakBytes), data.FormatBytes(a.PerSample),
			data.FormatBytes(a.InputBytes), data.FormatBytes(a.StateBytes))
		if pr := a.Probe; pr != nil {
			row("measured", "%s at batch %d: activations %s, the replay corrected by a step run here at batch %d (ONNX Runtime's allocator held %s at its peak where the replay counts %s); + batch and training state %s",
				data.FormatBytes(pr.PeakBytes+a.InputBytes+a.StateBytes), a.Batch, data.FormatBytes(pr.PeakBytes), pr.Step.Batch,
				data.FormatBytes(pr.Step.StepPeak), data.FormatBytes(pr.Replayed),
				data.FormatBytes(a.InputBytes+a.StateBytes))
		}
		if f := a.Fit; f != nil {
			basis := "replayed"
			if a.Probe != nil {
				basis = "replayed and calibrated by the probe"
			}
			if f.Batch == 0 {
				row("fits", "no batch in %s (%s): one sample takes %s (%s); CUDA's context and kernel workspaces on top", data.FormatBytes(f.DeviceBytes), f.Device, data.FormatBytes(f.TotalBytes), basis)
			} else {
				row("fits", "batch ≤ %d per device in %s (%s): %s at %d (%s); CUDA's context and kernel workspaces on top", f.Batch, data.FormatBytes(f.DeviceBytes), f.Device, data.FormatBytes(f.TotalBytes), f.Batch, basis)
			}
		}
		if sz := a.Sizes; sz != nil && len(sz.Over) == 0 {
			row("tensor sizes", "every tensor of the training graph at batch %d within 2^31 − 1 elements (what CUDA kernels take)", sz.Batch)
		} else if sz != nil {
			row("tensor sizes", "%d over 2^31 − 1 elements at batch %d (what CUDA kernels take): %s; %s", len(sz.Over), sz.Batch, sz.Describe(), sz.Advice)
		}
		switch {
		case a.Emulated && a.DeviceTypedBytes > 0:
			row("on the GPU", "%s at batch %d: activations %s as its low-precision kernels type the graph (low-precision values in 2 bytes, no rounding copies) + batch and training state %s; the figure above, emulated here (float32 with rounding copies), bounds it",
				data.FormatBytes(a.DeviceTypedBytes+a.InputBytes+a.StateBytes), a.Batch, data.FormatBytes(a.DeviceTypedBytes), data.FormatBytes(a.InputBytes+a.StateBytes))
		case a.Emulated:
			row("", "the low-precision products were emulated here (float32 with rounding copies), which holds more than a GPU with their kernels: --set trainer.precision=32 gives the closer upper bound")
		}
	}

	d := p.Data
	row("data", "%s", d.Kind)
	for _, pp := range []Path{d.Train, d.Val} {
		switch {
		case d.Kind == config.KindSynthetic:
		case pp.Path == "":
			row("  "+pp.Key, "not set")
		case pp.Exists:
			row("  "+pp.Key, "%s", pp.Path)
		default:
			row("  "+pp.Key, "%s (does not exist)", pp.Path)
		}
	}
	row("  validation", "%s", d.Validation)
	if d.Unopened == "" {
		draws := ""
		if d.ValDraws > 1 {
			draws = fmt.Sprintf(" × %d noise draws", d.ValDraws)
		}
		row("  samples", "%d train, %d val%s", d.TrainSamples, d.ValSamples, draws)
	} else {
		row("  samples", "unknown: %s", d.Unopened)
	}

	b := p.Batch
	row("batch", "%d per device × %d accumulated × %d device%s = %d per optimizer step", b.PerDevice, b.Accumulate, b.WorldSize, map[bool]string{true: "s"}[b.WorldSize > 1], b.Effective)
	if b.Collective != "" {
		row("ranks", "%s", b.Collective)
	}
	lr := p.LR
	if lr.Scaling == "none" || lr.BaseBatch == 0 {
		row("lr", "%s (no scaling) → peak %s", num(lr.Base), num(lr.Peak))
	} else {
		row("lr", "%s at batch %d, %s scaling to batch %d → peak %s", num(lr.Base), lr.BaseBatch, lr.Scaling, b.Effective, num(lr.Peak))
	}
	sched := lr.Schedule
	if lr.Schedule != "constant" {
		sched += " to min_lr " + num(lr.MinLR)
	}
	switch {
	case lr.WarmupRatio > 0 && p.Steps.Total == 0:
		sched += fmt.Sprintf(", warmup %g of the run", lr.WarmupRatio)
	case lr.WarmupRatio > 0:
		sched += fmt.Sprintf(", warmup %d steps (%g of the run)", lr.Warmup, lr.WarmupRatio)
	case lr.Warmup > 0:
		sched += fmt.Sprintf(", warmup %d steps", lr.Warmup)
	}
	row("schedule", "%s", sched)
	var pts []string
	for _, pt := range lr.Points {
		pts = append(pts, fmt.Sprintf("step %d (%s) %s", pt.Step, pt.Label, num(pt.LR)))
	}
	if p.Steps.Total == 0 && lr.Schedule != "constant" {
		pts = append(pts, "later steps need the run length")
	}
	row("  lr at", "%s", strings.Join(pts, "; "))

	s := p.Steps
	perEpoch := "unknown"
	if s.PerEpoch > 0 {
		perEpoch = thousands(s.PerEpoch)
	}
	row("steps", "%s per epoch; total %s", perEpoch, p.total())
	switch {
	case strings.HasPrefix(d.Validation, "none"):
		row("validation", "none")
	case s.ValEvery > 0:
		row("validation", "every %s steps (val_check_interval %s)", thousands(s.ValEvery), s.ValInterval)
	default:
		row("validation", "every %s epoch (steps per epoch unknown)", s.ValInterval)
	}
	ck := "after each validation and at the end"
	if s.CheckpointEvery > 0 {
		ck = fmt.Sprintf("every %s steps, %s", thousands(s.CheckpointEvery), ck)
	}
	switch {
	case s.SaveTopK < 0:
		ck += "; keep every one (save_top_k = -1)"
	case s.Monitor != "" && s.SaveTopK != 0:
		ck += fmt.Sprintf("; keep the %s best by %s (%s) and the newest", topK(s.SaveTopK), s.Monitor, s.Mode)
	default:
		ck += "; keep the newest"
	}
	row("checkpoints", "%s", ck)

	l := p.Loader
	if !l.Known {
		row("loader", "%d workers × (1 + %d prefetch) + 1 = %d batch buffers; sizes unknown", l.Workers, l.Prefetch, l.Buffers)
	} else {
		est := ""
		if l.Estimated {
			est = " (estimated from the config)"
		}
		cache := ""
		if l.CacheBytes > 0 {
			cache = " + cache " + data.FormatBytes(l.CacheBytes)
		}
		bound := "limit"
		if l.LimitIsRAM {
			bound = "machine memory"
		}
		verdict := bound + " " + data.FormatBytes(l.Limit) + ": fits"
		if l.TotalBytes > l.Limit {
			verdict = bound + " " + data.FormatBytes(l.Limit) + ": OVER"
		}
		row("loader", "(%d workers × (1 + %d prefetch) + 1) × %s per batch%s = %s host memory%s; %s",
			l.Workers, l.Prefetch, data.FormatBytes(l.BatchBytes), cache, data.FormatBytes(l.TotalBytes), est, verdict)
	}
	for _, n := range p.Notes {
		row("note", "%s", n)
	}
	for _, n := range p.Warnings {
		row("WARNING", "%s", n)
	}
	for _, n := range p.Refusals {
		row("REFUSED", "%s", n)
	}
	return tw.Flush()
}

// total says the run length and where it comes from.
func (p *Plan) total() string {
	s := p.Steps
	switch {
	case s.Total > 0 && s.MaxEpochs > 0 && (s.MaxSteps == 0 || s.Total < s.MaxSteps):
		return fmt.Sprintf("%s (%d epochs)", thousands(s.Total), s.MaxEpochs)
	case s.Total > 0:
		return thousands(s.Total) + " (trainer.max_steps)"
	case s.MaxSteps > 0:
		return fmt.Sprintf("at most %s (trainer.max_steps), fewer if %d epochs end first", thousands(s.MaxSteps), s.MaxEpochs)
	default:
		return fmt.Sprintf("%d epochs of unknown length", s.MaxEpochs)
	}
}

func topK(k int) string {
	if k < 0 {
		return "all"
	}
	return strconv.Itoa(k)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func sizeOr(n int64, zero string) string {
	if n == 0 {
		return zero
	}
	return data.FormatBytes(n)
}

// num writes a learning rate briefly.
func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// thousands writes n with thin separators: 36,335,321.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
