package artifacts

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/memplan"
)

// GraphReport describes one graph of an artifact set.
type GraphReport struct {
	File    string
	Inputs  []string // "name: dtype[dims]"
	Outputs []string
	Ops     map[string]int // op type (domain-qualified outside ai.onnx) -> node count
	// CPU is "ok", the error ONNX Runtime gave when loading the graph on the
	// CPU provider (naming an op without a kernel), or "not checked".
	CPU string
	// CUDA is "ok", the nodes that would fall back to the CPU, or "not
	// checked" when the loaded ONNX Runtime has no CUDA provider.
	CUDA string
}

// Report is what `ortrain artifacts inspect` prints.
type Report struct {
	Manifest   *Manifest
	ParamCount int64
	Graphs     []GraphReport
}

// Inspect reads an artifact directory and, when ONNX Runtime is loaded,
// checks that every graph gets kernels on the CPU and, if the library has
// it, the CUDA provider.
func Inspect(dir string) (Report, error) {
	m, err := Load(dir)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Manifest: m, ParamCount: m.ParamCount()}
	cuda := false
	if ort.Initialised() {
		if ps, err := ort.AvailableProviders(); err == nil {
			cuda = slices.Contains(ps, "CUDAExecutionProvider")
		}
	}
	for _, f := range []string{TrainingFile, EvalFile, OptimizerFile} {
		path := filepath.Join(dir, f)
		g, err := graph.Load(path)
		if err != nil {
			return Report{}, err
		}
		gr := GraphReport{File: f, Ops: map[string]int{}, CPU: "not checked (ONNX Runtime not loaded)", CUDA: "not checked (no CUDA provider in the loaded ONNX Runtime)"}
		for _, in := range g.Inputs {
			gr.Inputs = append(gr.Inputs, in+": "+g.Info(in).String())
		}
		for _, o := range g.Outputs {
			gr.Outputs = append(gr.Outputs, o+": "+g.Info(o).String())
		}
		for _, n := range g.Nodes {
			op := n.Op
			if n.Domain != "" {
				op = n.Domain + "." + op
			}
			gr.Ops[op]++
		}
		if ort.Initialised() {
			gr.CPU = check(path, ort.Options{Device: ort.CPU})
			if cuda {
				gr.CUDA = check(path, ort.Options{Device: ort.CUDADevice(0)})
			}
		}
		rep.Graphs = append(rep.Graphs, gr)
	}
	return rep, nil
}

func check(path string, opts ort.Options) string {
	s, err := ort.NewSession(path, opts)
	if err != nil {
		if fb, ok := err.(*ort.CPUFallbackError); ok {
			var nodes []string
			for _, n := range fb.Nodes {
				nodes = append(nodes, n.Op+" ("+n.Name+")")
			}
			return "falls back to CPU: " + strings.Join(nodes, ", ")
		}
		return err.Error()
	}
	s.Close()
	return "ok"
}

// String formats the report for the terminal.
func (r Report) String() string {
	var b strings.Builder
	m := r.Manifest
	fmt.Fprintf(&b, "ortrain artifacts v%d (ortrain %s, opset %d)\n", m.FormatVersion, m.OrtrainVersion, m.Opset)
	fmt.Fprintf(&b, "parameters: %d tensors, %d values; frozen %d; buffers %d\n", len(m.Params), r.ParamCount, len(m.Frozen), len(m.Buffers))
	fmt.Fprintf(&b, "loss: %s (%s)  optimizer: %s lr %g\n", m.Loss, m.LossSpec.Kind, m.Optimizer.Kind, m.Optimizer.LR)
	fmt.Fprintf(&b, "precision: %s; recompute: %s\n", m.Precision, cmp.Or(m.Recompute, "cheap"))
	for _, w := range m.Warnings {
		fmt.Fprintf(&b, "warning (at build): %s\n", w)
	}
	for _, g := range r.Graphs {
		fmt.Fprintf(&b, "\n%s\n  inputs (%d):\n", g.File, len(g.Inputs))
		for _, s := range g.Inputs {
			fmt.Fprintf(&b, "    %s\n", s)
		}
		fmt.Fprintf(&b, "  outputs (%d):\n", len(g.Outputs))
		for _, s := range g.Outputs {
			fmt.Fprintf(&b, "    %s\n", s)
		}
		var ops []string
		for op, n := range g.Ops {
			ops = append(ops, fmt.Sprintf("%s×%d", op, n))
		}
		slices.Sort(ops)
		fmt.Fprintf(&b, "  ops: %s\n  CPU kernels: %s\n  CUDA kernels: %s\n", strings.Join(ops, " "), g.CPU, g.CUDA)
	}
	return b.String()
}

// MemoryReport is the predicted activation memory of a training step.
type MemoryReport struct {
	Batch int64
	*memplan.Report
	// State is the bytes the engine keeps on the device for the whole run:
	// parameters, gradient accumulators and optimizer states (each twice,
	// for the ping-pong buffers), buffers and frozen parameters.
	State int64
	// Optimizer is the optimizer graph's peak of intermediate values (the
	// update's temporaries; it does not grow with the batch).
	Optimizer int64
}

// StepPeak is what a step holds beside the training state and the batch
// where the training and optimizer graphs share one arena (the CPU): the
// larger of their peaks; with an arena each (a GPU), both.
func (r *MemoryReport) StepPeak(sharedArena bool) int64 {
	if sharedArena {
		return max(r.Peak, r.Optimizer)
	}
	return r.Peak + r.Optimizer
}

// Memory replays the training graph of the artifacts in dir at the given
// batch size (memplan): the intermediate values live at the peak of a
// step, beside the training state.
func Memory(dir string, batch int64) (*MemoryReport, error) {
	return MemoryAs(dir, batch, nil)
}

// MemoryAs is Memory with the training graph, at the batch's shapes,
// rewritten by retype before the replay (nil: as built): how another
// device would type and run it.
func MemoryAs(dir string, batch int64, retype func(c *graph.Graph)) (*MemoryReport, error) {
	m, err := Load(dir)
	if err != nil {
		return nil, err
	}
	g, err := graph.Load(filepath.Join(dir, TrainingFile))
	if err != nil {
		return nil, err
	}
	dims := map[string]int64{"": batch}
	for _, d := range m.Data {
		if len(d.Symbolic) > 0 && d.Symbolic[0] != "" {
			dims[d.Symbolic[0]] = batch
		}
	}
	c, err := memplan.Concrete(g, dims)
	if err != nil {
		return nil, &Error{fmt.Sprintf("%s: %v (only the batch dimension may be symbolic)", dir, err)}
	}
	if retype != nil {
		retype(c)
	}
	// State tensors are training-graph inputs (optimizer states take their
	// parameter's shape); all are double-buffered but frozen parameters.
	size := func(v string) int64 {
		info := c.Info(v)
		return dtype.Numel(info.Shape) * int64(info.DType.Size())
	}
	state := map[string]bool{}
	r := &MemoryReport{Batch: batch}
	for _, p := range m.Params {
		state[p.Name] = true
		r.State += 2 * size(p.Name)
	}
	for _, p := range m.Frozen {
		state[p.Name] = true
		r.State += size(p.Name)
	}
	for _, gr := range m.Gradients {
		state[gr.Name()], state[gr.Out] = true, true
		r.State += 2 * size(gr.Param)
	}
	for _, st := range m.Optimizer.States {
		r.State += 2 * size(st.Param)
	}
	for _, b := range m.Buffers {
		state[b.Name], state[b.Out] = true, true
		r.State += 2 * size(b.Name)
	}
	// ONNX Runtime plans buffer reuse only between values whose shapes
	// it knows: those that do not grow with the (unnamed) batch, and those
	// whose dimensions ortrain names.
	sized := map[string]bool{}
	for v, info := range g.Infos {
		named := info.Known
		for k, d := range info.Shape {
			named = named && (d >= 0 || k < len(g.Dims[v]) && g.Dims[v][k] != "")
		}
		sized[v] = named
	}
	r.Report = memplan.Replay(c, state, sized)
	og, err := graph.Load(filepath.Join(dir, OptimizerFile))
	if err != nil {
		return nil, err
	}
	r.Optimizer = memplan.Replay(og, nil, nil).Peak
	return r, nil
}

// String lists the peak and the values that make it, the largest first,
// grouped by the op producing them.
func (r *MemoryReport) String() string {
	var b strings.Builder
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
	fmt.Fprintf(&b, "training step at batch %d, as ONNX Runtime orders it (graph-level, as its planner lays the values out: kernel scratch and the allocator's rounding not included; `ortrain plan --memory --probe N` measures a step):\n", r.Batch)
	fmt.Fprintf(&b, "  activations at the peak  %s (%s per sample), while node %q runs (%d of %d)\n", mb(r.Peak), mb(r.Peak/max(r.Batch, 1)), r.PeakNode, r.PeakAt+1, len(r.Order))
	fmt.Fprintf(&b, "  optimizer's temporaries  %s at its peak (the update; the same at any batch)\n", mb(r.Optimizer))
	fmt.Fprintf(&b, "  batch inputs             %s\n", mb(r.Inputs))
	fmt.Fprintf(&b, "  training state           %s (parameters, gradients, optimizer state, buffers; double-buffered)\n", mb(r.State))
	byOp := map[string]int64{}
	for _, v := range r.Live {
		byOp[v.Op] += v.Bytes
	}
	ops := slices.Collect(maps.Keys(byOp))
	slices.SortFunc(ops, func(a, c string) int { return cmp.Compare(byOp[c], byOp[a]) })
	b.WriteString("  live at the peak by producing op:\n")
	for _, op := range ops {
		if byOp[op] >= r.Peak/1000 {
			fmt.Fprintf(&b, "    %-24s %s\n", op, mb(byOp[op]))
		}
	}
	b.WriteString("  largest values live at the peak:\n")
	for _, v := range r.Live[:min(len(r.Live), 15)] {
		fmt.Fprintf(&b, "    %10s  %-20s %s (node %s)\n", mb(v.Bytes), v.Op, v.Name, v.Node)
	}
	if len(r.Unsized) > 0 {
		fmt.Fprintf(&b, "  %d values of unknown size counted as 0, e.g. %s\n", len(r.Unsized), r.Unsized[0])
	}
	return b.String()
}
