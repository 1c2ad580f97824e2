package artifacts

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
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
