package precision

import (
	"fmt"
	"strings"
	"sync"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
)

// Probe finds out which kernels a device has by creating, once per op,
// domain, input types and attributes, a session for a graph of that one
// node with the typed float inputs in the wanted type: ONNX Runtime picks
// kernels when a session is created, so a missing one fails there (on the
// CUDA provider, with fallback to the CPU off, as a CPUFallbackError).
type Probe struct {
	Options ort.Options // the device and its settings
	Opset   int64
	mu      sync.Mutex
	seen    map[string]bool
	// Missing records, per probe that found no kernel, why.
	Missing map[string]string
}

// NewProbe returns a probe for sessions with opts; a fallback to the CPU
// is never allowed, since it is what the probe looks for.
func NewProbe(opts ort.Options, opset int64) *Probe {
	opts.CUDA.AllowCPUFallback = false
	opts.ProfilePrefix = ""
	opts.Quiet = true // a kernel the device lacks is an answer, not an error to print
	return &Probe{Options: opts, Opset: opset, seen: map[string]bool{}, Missing: map[string]string{}}
}

// Parse returns the low-precision type named by a precision setting:
// bf16 (or bf16-mixed) and fp16 (or 16-mixed); ok is false for float32
// ("", 32, fp32, tf32) and err non-nil for anything else. The names are
// those of `ortrain artifacts build --precision`, which its error names
// (trainer.precision is checked, and normalised, by the config first).
func Parse(name string) (dt dtype.DType, ok bool, err error) {
	switch name {
	case "", "32", "fp32", "32-true", "tf32":
		return 0, false, nil
	case "bf16", "bf16-mixed":
		return dtype.BFloat16, true, nil
	case "fp16", "16", "16-mixed":
		return dtype.Float16, true, nil
	}
	hint := ""
	if lower := strings.ToLower(name); lower != name {
		if _, _, err := Parse(lower); err == nil {
			hint = fmt.Sprintf(" (in lower case: --precision %s)", lower)
		}
	}
	return 0, false, fmt.Errorf("--precision %q is not one of fp32, bf16, fp16%s", name, hint)
}

// Has reports whether the device runs n with its typed float inputs in dt
// and its other inputs as in g.
//
// On the CPU provider it is false for float16 and bfloat16 whatever the
// session says: ONNX Runtime runs a float16 node the CPU lacks in float32
// between Casts of its own and then drops the Casts next to ours, so the
// values would never be rounded (measured: 1e12 survives a float16 MatMul
// input); the CPU then emulates instead (see Autocast).
func (p *Probe) Has(g *graph.Graph, n *graph.Node, dt dtype.DType) bool {
	if !p.Options.Device.CUDA && (dt == dtype.Float16 || dt == dtype.BFloat16) {
		return false
	}
	one := graph.New("probe", max(p.Opset, g.Opset))
	for d, v := range g.Domains {
		one.Domains[d] = v
	}
	isTyped := map[int]bool{}
	for _, i := range typed(n) {
		isTyped[i] = true
	}
	var key strings.Builder
	fmt.Fprintf(&key, "%s.%s:", n.Domain, n.Op)
	node := n.Clone()
	node.Name = "probe"
	for i, in := range n.Inputs {
		if in == "" {
			continue
		}
		info := g.Info(in)
		if !info.Known {
			info = graph.Info{DType: info.DType}
		}
		if isTyped[i] && info.Float() {
			info.DType = dt
		}
		// Sizes do not choose kernels; ranks may (Conv's dimensions).
		shape := make([]int64, len(info.Shape))
		for k := range shape {
			shape[k] = -1
		}
		info.Shape = shape
		name := fmt.Sprintf("in%d", i)
		node.Inputs[i] = name
		one.AddInput(name, info)
		fmt.Fprintf(&key, "%s/%d,", info.DType, len(shape))
	}
	for i, o := range node.Outputs {
		if o != "" {
			node.Outputs[i] = fmt.Sprintf("out%d", i)
		}
	}
	for _, a := range n.Attrs {
		fmt.Fprintf(&key, "%s", a.String())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := key.String()
	if ok, done := p.seen[k]; done {
		return ok
	}
	one.AddNode(node)
	for _, o := range node.Outputs {
		if o != "" {
			one.Outputs = append(one.Outputs, o)
		}
	}
	ok := false
	m, err := one.Marshal()
	if err == nil {
		var s *ort.Session
		if s, err = ort.NewSessionFromBytes(m, p.Options); err == nil {
			s.Close()
			ok = true
		}
	}
	if err != nil {
		p.Missing[fmt.Sprintf("%s in %s", n.Op, dt)] = err.Error()
	}
	p.seen[k] = ok
	return ok
}

// Kernels is p as Autocast's kernel oracle over g.
func (p *Probe) Kernels(g *graph.Graph) Kernels {
	return func(n *graph.Node, dt dtype.DType) bool { return p.Has(g, n, dt) }
}
