// Package artifacts builds and inspects ortrain's artifact set: the
// training, eval and optimizer graphs derived from a forward model, its
// initial weights as safetensors, and manifest.json tying their inputs and
// outputs together. SPEC.md in this folder is the format's specification.
package artifacts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/loss"
	"github.com/ortrain/ortrain/training/optim"
)

// Version is the ortrain version recorded in manifests.
const Version = "0.1.0"

// FormatVersion is the version of the artifact format SPEC.md describes.
// Version 2 added the optimizer's flat groups (Optimizer.Groups); version 1
// artifacts (a per-parameter optimizer graph) are still read.
const FormatVersion = 2

// File names inside an artifact directory.
const (
	TrainingFile  = "training.onnx"
	EvalFile      = "eval.onnx"
	OptimizerFile = "optimizer.onnx"
	WeightsFile   = "weights.safetensors"
	ManifestFile  = "manifest.json"
)

// Reset is the rank-0 bool input of a training graph that accumulates
// (version 1 and imported artifacts; Manifest.Reset names it, "" when the
// graph writes each micro-batch's gradients alone): true makes the step's
// gradient replace the accumulators instead of adding to them.
const Reset = "reset"

// LossScale is the float16 training graph's rank-0 float32 input: the
// backward pass starts from loss × LossScale (dynamic loss scaling,
// precision.LossScaler); the optimizer's grad_scale divides it out.
const LossScale = "loss_scale"

// Tensor describes a graph input or state tensor: element type name as
// dtype.DType writes it, dimensions with -1 where not fixed, and the symbolic
// names of those dimensions ("" where none).
type Tensor struct {
	Name     string   `json:"name"`
	DType    string   `json:"dtype"`
	Shape    []int64  `json:"shape"`
	Symbolic []string `json:"symbolic,omitempty"`
}

// Pair is an input whose new value a graph returns in output Out.
type Pair struct {
	Name string `json:"name"`
	Out  string `json:"out"`
}

// Gradient ties a parameter to its accumulator: the training graph's input
// Acc and output Out, which the optimizer graph reads as input Acc.
type Gradient struct {
	Param string `json:"param"`
	// Acc is the accumulator input; "" for a graph that writes each
	// micro-batch's gradient alone (the trainer sums micro-batches).
	Acc string `json:"acc,omitempty"`
	Out string `json:"out"`
}

// Name is the per-parameter gradient tensor's name, what the optimizer's
// flat groups call it: the accumulator input where the graph has one, else
// grad.<param>.
func (g Gradient) Name() string {
	if g.Acc != "" {
		return g.Acc
	}
	return optim.GradName(g.Param)
}

// Optimizer records the optimizer graph's settings and interface.
type Optimizer struct {
	optim.Config
	LRInput        string `json:"lr_input"`
	StepInput      string `json:"step_input"`
	GradScaleInput string `json:"grad_scale_input"`
	ClipNormInput  string `json:"clip_norm_input"`
	GradNormOutput string `json:"grad_norm_output"`
	// UpdateFiniteOutput names the bool output saying every new parameter
	// is finite (absent in artifacts from older versions and imports).
	UpdateFiniteOutput string  `json:"update_finite_output,omitempty"`
	States             []State `json:"states"`
	// Groups, when present, say that the optimizer graph reads and writes
	// parameters, gradients and state as flat tensors (optim.Group): a
	// trainer keeps each as one allocation, and the per-parameter tensors
	// the training graph and checkpoints see are views of it. Absent, the
	// graph reads every tensor by its own name (version 1, imports).
	Groups []optim.Group `json:"groups,omitempty"`
}

// State is an optimizer state tensor, zeros of its parameter's shape at the
// start, updated through output Out.
type State struct {
	Name  string `json:"name"`
	Param string `json:"param"`
	Out   string `json:"out"`
}

// Precision is the graphs' arithmetic: the type of the low-precision
// compute ("float32" when there is none) and of the master weights the
// optimizer updates (always float32), with how many forward nodes run in
// each (precision.Autocast).
type Precision struct {
	Compute       string   `json:"compute"`
	Master        string   `json:"master"`
	LowNodes      int      `json:"low_nodes,omitempty"`
	FP32Nodes     int      `json:"fp32_nodes,omitempty"`
	EmulatedNodes int      `json:"emulated_nodes,omitempty"`
	NoKernel      []string `json:"no_kernel,omitempty"` // ops kept in float32 for want of a low-precision kernel
}

// String says what runs in which precision, for a run's first lines.
func (p Precision) String() string {
	if p.Compute == "" || p.Compute == "float32" {
		return "float32 throughout"
	}
	s := fmt.Sprintf("%s mixed: %d forward nodes in %s, %d in float32; master weights, gradients and optimizer state in %s",
		p.Compute, p.LowNodes, p.Compute, p.FP32Nodes, p.Master)
	if p.EmulatedNodes > 0 {
		s += fmt.Sprintf("; %d matrix products EMULATED (float32 kernels on %s-rounded values: the numerics of %s, not its speed or memory)",
			p.EmulatedNodes, p.Compute, p.Compute)
	}
	if len(p.NoKernel) > 0 {
		s += fmt.Sprintf("; no %s kernel on this device for %s (kept in float32)", p.Compute, strings.Join(p.NoKernel, ", "))
	}
	return s
}

// Parallel leaves room for data parallelism: how gradient accumulators are
// reduced across devices between the training and optimizer graphs. Only
// "none" is built today; an all-reduce would act on the Gradients' Out
// tensors before the optimizer runs.
type Parallel struct {
	GradientReduce string `json:"gradient_reduce"`
}

// Manifest is manifest.json.
type Manifest struct {
	Format         string            `json:"format"`
	FormatVersion  int               `json:"format_version"`
	OrtrainVersion string            `json:"ortrain_version"`
	Opset          int64             `json:"opset"`
	Files          map[string]string `json:"files"`
	Data           []Tensor          `json:"data"`      // batch inputs, targets included
	Params         []Tensor          `json:"params"`    // trained
	Frozen         []Tensor          `json:"frozen"`    // read, never updated
	Buffers        []Pair            `json:"buffers"`   // updated by the training graph (BatchNorm statistics)
	Gradients      []Gradient        `json:"gradients"` // one per param, same order
	Reset          string            `json:"reset"`
	Loss           string            `json:"loss"`
	LossSpec       loss.Spec         `json:"loss_spec"`
	Outputs        []string          `json:"outputs"` // model outputs, in training and eval graphs
	Optimizer      Optimizer         `json:"optimizer"`
	Precision      Precision         `json:"precision"`
	Parallel       Parallel          `json:"parallel"`
	// LossScaleInput names the training graph's loss-scale input (float16
	// compute only; see LossScale).
	LossScaleInput string `json:"loss_scale_input,omitempty"`
	// ConfigHash is the hash of the run configuration the artifacts were
	// built for (config.Config.Hash); "" when built by `artifacts build`.
	ConfigHash string `json:"config_hash,omitempty"`
	// StepInput is the training graph's graph.GlobalStepInput when the
	// model reads the optimizer step (a loss term starting at a step);
	// the trainer feeds it. Eval graphs never read it.
	StepInput string `json:"step_input,omitempty"`
	// Recompute is the policy the training graph was built with: which
	// forward values its backward recomputes (autodiff.RecomputePolicies).
	Recompute string `json:"recompute,omitempty"`
	// RandomSeed is the seed the training graph's random nodes (Dropout's
	// masks) were seeded from (Options.Seed); nil when it has none. The
	// seeds are node attributes, fixed when the graphs are built.
	RandomSeed *int64 `json:"random_seed,omitempty"`
	// Classes is a cross-entropy loss's class count (its logits' axis 1);
	// 0 for other losses. Setup checks a class-folder dataset against it.
	Classes int `json:"classes,omitempty"`
	// Notes records assumptions the graphs bake in (fixed sizes...).
	Notes []string `json:"notes,omitempty"`
	// Warnings are what Build found suspicious in the model but trained
	// anyway (initializers that look like buffers or folded constants);
	// `artifacts build` and `artifacts inspect` print them.
	Warnings []string `json:"warnings,omitempty"`
}

// ParamCount is the number of trained scalars.
func (m *Manifest) ParamCount() int64 {
	var n int64
	for _, p := range m.Params {
		n += dtype.Numel(p.Shape)
	}
	return n
}

// Load reads dir/manifest.json.
func Load(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	m := &Manifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("artifacts: %s: %w", ManifestFile, err)
	}
	if m.Format != "ortrain.artifacts" || m.FormatVersion < 1 || m.FormatVersion > FormatVersion {
		return nil, fmt.Errorf("artifacts: %s is format %q version %d; this ortrain reads ortrain.artifacts versions 1 to %d", dir, m.Format, m.FormatVersion, FormatVersion)
	}
	if err := m.checkGroups(); err != nil {
		return nil, fmt.Errorf("artifacts: %s: optimizer groups: %w", filepath.Join(dir, ManifestFile), err)
	}
	return m, nil
}

// checkGroups checks that the optimizer's flat groups place every trained
// parameter once, inside its group's tensors, without overlap, with the
// parameter's type and shape, and that every per-parameter tensor a flat
// tensor holds is one the manifest names: a trainer makes device views from
// these numbers.
func (m *Manifest) checkGroups() error {
	groups := m.Optimizer.Groups
	if len(groups) == 0 {
		if m.Reset == "" {
			return fmt.Errorf("the training graph writes each micro-batch's gradients alone (no %q input) and the optimizer has no flat groups, in which a trainer sums them", Reset)
		}
		return nil
	}
	params := map[string]Tensor{}
	for _, p := range m.Params {
		params[p.Name] = p
	}
	states := map[string]bool{}
	for _, s := range m.Optimizer.States {
		states[s.Name] = true
	}
	placed := map[string]bool{}
	flat := map[string]bool{}
	for gi, g := range groups {
		if !g.DType.Supported() || g.DType.Size() == 0 {
			return fmt.Errorf("group %d has element type %v", gi, g.DType)
		}
		var end int64
		for _, mb := range g.Members {
			p, ok := params[mb.Param]
			switch {
			case !ok:
				return fmt.Errorf("group %d places %q, which is not a trained parameter", gi, mb.Param)
			case placed[mb.Param]:
				return fmt.Errorf("%q is placed twice", mb.Param)
			case p.DType != g.DType.String() || !slices.Equal(p.Shape, mb.Shape) || mb.Len != dtype.Numel(p.Shape):
				return fmt.Errorf("group %d places %q as %v%v (%d elements); the parameter is %s%v", gi, mb.Param, g.DType, mb.Shape, mb.Len, p.DType, p.Shape)
			case mb.Offset < end || mb.Len < 0 || mb.Offset > g.Size-mb.Len:
				return fmt.Errorf("group %d places %q at [%d, %d), overlapping another or outside its %d elements", gi, mb.Param, mb.Offset, mb.Offset+mb.Len, g.Size)
			}
			placed[mb.Param] = true
			end = mb.Offset + mb.Len
		}
		if g.Size > 2*end+1<<20 {
			return fmt.Errorf("group %d has %d elements for members ending at %d", gi, g.Size, end)
		}
		roles := map[string]bool{}
		for _, f := range g.Flat {
			if flat[f.Name] || f.Name == "" {
				return fmt.Errorf("flat tensor %q named twice or empty", f.Name)
			}
			flat[f.Name], roles[f.Prefix] = true, true
			if f.Prefix == "" || f.Prefix == optim.GradName("") {
				continue
			}
			for _, mb := range g.Members {
				if !states[f.Prefix+mb.Param] {
					return fmt.Errorf("flat tensor %q holds %q, which is not an optimizer state", f.Name, f.Prefix+mb.Param)
				}
			}
		}
		if !roles[""] || !roles[optim.GradName("")] {
			return fmt.Errorf("group %d has no flat parameters or gradients", gi)
		}
	}
	for _, p := range m.Params {
		if !placed[p.Name] {
			return fmt.Errorf("trained parameter %q is in no group", p.Name)
		}
	}
	return nil
}
