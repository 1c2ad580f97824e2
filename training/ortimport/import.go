package ortimport

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/loss"
	"github.com/ortrain/ortrain/training/optim"
	"github.com/ortrain/ortrain/training/safefile"
	"github.com/ortrain/ortrain/training/safetensors"
)

// Options are `ortrain artifacts import`'s flags.
type Options struct {
	Dir       string // --ort: the folder generate_artifacts wrote
	Out       string // --out: the ortrain artifact directory to write
	Overwrite bool   // replace the artifact files in a non-empty Out
}

// The file names generate_artifacts writes.
const (
	TrainingModel  = "training_model.onnx"
	EvalModel      = "eval_model.onnx"
	OptimizerModel = "optimizer_model.onnx"
	CheckpointFile = "checkpoint"
)

// accumulator is ONNX Runtime's suffix for a gradient accumulation buffer.
const accumulator = "_grad.accumulation.buffer"

// Import turns ONNX Runtime training artifacts into an ortrain artifact
// directory: training.onnx with every com.microsoft op lowered, the
// accumulation buffers renamed grad.<param> and the lazy_reset_grad flag
// become the scalar reset; eval.onnx with its loss named loss; an
// optimizer.onnx in ortrain's interface doing what the AdamWOptimizer or
// SGDOptimizerV2 node did; weights.safetensors from the checkpoint.
func Import(opts Options) (*artifacts.Manifest, error) {
	if opts.Dir == "" || opts.Out == "" {
		return nil, &FormatError{opts.Dir, "both the ONNX Runtime artifact folder and an output directory are needed"}
	}
	if ents, err := os.ReadDir(opts.Out); err == nil && len(ents) > 0 && !opts.Overwrite {
		return nil, &artifacts.Error{Msg: fmt.Sprintf("%s exists and is not empty; choose another --out or allow overwriting", opts.Out)}
	}
	var missing []string
	for _, f := range []string{TrainingModel, EvalModel, OptimizerModel, CheckpointFile} {
		if _, err := os.Stat(filepath.Join(opts.Dir, f)); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return nil, &FormatError{opts.Dir, fmt.Sprintf("not generate_artifacts output: %s missing (want %s, %s, %s and %s)",
			strings.Join(missing, ", "), TrainingModel, EvalModel, OptimizerModel, CheckpointFile)}
	}
	ck, err := ReadCheckpoint(filepath.Join(opts.Dir, CheckpointFile))
	if err != nil {
		return nil, err
	}
	if ck.Nominal {
		return nil, &FormatError{opts.Dir, "the checkpoint is nominal (names without data)"}
	}
	tg, err := graph.Load(filepath.Join(opts.Dir, TrainingModel))
	if err != nil {
		return nil, err
	}
	eg, err := graph.Load(filepath.Join(opts.Dir, EvalModel))
	if err != nil {
		return nil, err
	}
	ob, err := safefile.ReadFile(filepath.Join(opts.Dir, OptimizerModel))
	if err != nil {
		return nil, err
	}
	optNode, err := optimizerNode(ob)
	if err != nil {
		return nil, err
	}

	m := &artifacts.Manifest{Format: "ortrain.artifacts", FormatVersion: artifacts.FormatVersion, OrtrainVersion: artifacts.Version,
		Files: map[string]string{"training": artifacts.TrainingFile, "eval": artifacts.EvalFile, "optimizer": artifacts.OptimizerFile, "weights": artifacts.WeightsFile},
		Reset: artifacts.Reset, Loss: loss.Name, LossSpec: loss.Spec{Kind: loss.Output, Output: loss.Name},
		Precision: artifacts.Precision{Compute: "float32", Master: "float32"}, Parallel: artifacts.Parallel{GradientReduce: "none"},
		Notes: []string{"imported from ONNX Runtime training artifacts in " + opts.Dir}}
	var weights []safetensors.Tensor
	var params []optim.Param
	state := map[string]bool{}
	for i, group := range [][]Tensor{ck.Params, ck.Frozen} {
		for _, t := range group {
			weights = append(weights, safetensors.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: t.Data})
			desc := artifacts.Tensor{Name: t.Name, DType: t.DType.String(), Shape: t.Shape}
			state[t.Name] = true
			if i == 0 {
				m.Params = append(m.Params, desc)
				params = append(params, optim.Param{Name: t.Name, Info: graph.Info{DType: t.DType, Known: true, Shape: t.Shape}})
			} else {
				m.Frozen = append(m.Frozen, desc)
			}
		}
	}
	train, err := trainingGraph(tg, ck, m, state)
	if err != nil {
		return nil, err
	}
	eval, err := evalGraph(eg)
	if err != nil {
		return nil, err
	}
	opt, cfg, err := optimizerGraph(optNode, params, ck)
	if err != nil {
		return nil, err
	}
	m.Opset = train.Opset
	m.Optimizer = cfg
	for _, gr := range ck.Groups {
		if len(gr.States) > 0 || gr.Step > 0 {
			// Format version 1 starts optimizer state at zeros.
			m.Notes = append(m.Notes, fmt.Sprintf("the checkpoint's optimizer state (group %q, step %d) was not imported; moments restart at zero", gr.Name, gr.Step))
		}
	}

	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	for file, g := range map[string]*graph.Graph{artifacts.TrainingFile: train, artifacts.EvalFile: eval, artifacts.OptimizerFile: opt} {
		if err := g.Save(filepath.Join(opts.Out, file), graph.SaveOptions{ExternalThreshold: 1 << 30}); err != nil {
			return nil, err
		}
	}
	if err := safetensors.Write(filepath.Join(opts.Out, artifacts.WeightsFile), weights, map[string]string{"producer": "ortrain " + artifacts.Version + " import"}); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return m, os.WriteFile(filepath.Join(opts.Out, artifacts.ManifestFile), append(b, '\n'), 0o644)
}

// trainingGraph rebuilds ONNX Runtime's training graph node by node,
// copying standard ops and lowering the rest.
func trainingGraph(src *graph.Graph, ck *Checkpoint, m *artifacts.Manifest, state map[string]bool) (*graph.Graph, error) {
	g := graph.New("training", src.Opset)
	for _, name := range src.InitOrder {
		g.AddInitializer(src.Initializers[name])
	}
	rename := map[string]string{}
	var accOf = map[string]string{} // buffer -> param
	var resetIn string
	for _, in := range src.Inputs {
		info := src.Info(in)
		switch {
		case strings.HasSuffix(in, accumulator) && state[strings.TrimSuffix(in, accumulator)]:
			p := strings.TrimSuffix(in, accumulator)
			rename[in] = optim.GradName(p)
			accOf[in] = p
			g.AddInput(optim.GradName(p), info)
		case info.DType == ort.Bool && numel(info) == 1 && strings.Contains(in, "reset"):
			resetIn = in
			g.AddInput(artifacts.Reset, graph.Info{DType: ort.Bool, Known: true, Shape: []int64{}})
			rename[in] = artifacts.Reset
		default:
			g.AddInput(in, info)
			if !state[in] {
				m.Data = append(m.Data, artifacts.Tensor{Name: in, DType: info.DType.String(), Shape: info.Shape, Symbolic: src.Dims[in]})
			}
		}
	}
	if resetIn == "" && len(accOf) > 0 {
		return nil, &FormatError{"training_model.onnx", "gradient accumulators without a reset flag input"}
	}
	producers := src.Producers()
	b := graph.NewBuilder(g, "lowered/")
	gradOut := map[string]string{}
	for _, n0 := range src.Nodes {
		n := n0.Clone()
		for i, in := range n.Inputs {
			if r, ok := rename[in]; ok {
				n.Inputs[i] = r
			}
		}
		switch {
		case n.Domain == "" || n.Domain == "ai.onnx":
			g.AddNode(n)
			// Declared facts the inference does not know.
			for _, o := range n.Outputs {
				if o != "" && !g.Info(o).Known && src.Info(o).Known {
					g.Infos[o] = src.Info(o)
				}
			}
		case n.Domain == "com.microsoft" && n.Op == "InPlaceAccumulatorV2":
			p := accOf[n0.Input(0)]
			if p == "" {
				return nil, &FormatError{"training_model.onnx", fmt.Sprintf("accumulator %s does not belong to a trained parameter", n0.Input(0))}
			}
			acc := optim.GradName(p)
			out := b.OpInto(optim.Out(acc), "Where", []string{artifacts.Reset, n.Input(1), b.Add(n.Input(1), acc)})
			gradOut[p] = out
			for _, o := range n.Outputs { // the "updated" flag
				if o != "" {
					b.OpInto(o, "Identity", []string{b.Const(graph.Raw("", ort.Bool, []int64{1}, []byte{1}))})
				}
			}
		case n.Domain == "com.microsoft":
			for _, o := range n.Outputs {
				if o != "" && src.Info(o).Known {
					g.Infos[o] = src.Info(o) // for AveragePoolGrad
				}
			}
			if err := lower(b, n, producers); err != nil {
				return nil, err
			}
		default:
			return nil, &UnsupportedOpError{n.Domain + "." + n.Op, n.Name}
		}
		if b.Err != nil {
			return nil, b.Err
		}
	}
	var lossOut string
	for _, o := range src.Outputs {
		if g.Info(o).Float() && numel(g.Info(o)) == 1 {
			lossOut = o
			break
		}
	}
	if lossOut == "" {
		return nil, &FormatError{"training_model.onnx", "no scalar loss output"}
	}
	b.OpInto(loss.Name, "Identity", []string{lossOut})
	g.Outputs = []string{loss.Name}
	for _, p := range ck.Params {
		out, ok := gradOut[p.Name]
		if !ok {
			return nil, &FormatError{"training_model.onnx", fmt.Sprintf("no gradient accumulator for parameter %s", p.Name)}
		}
		g.Outputs = append(g.Outputs, out)
		m.Gradients = append(m.Gradients, artifacts.Gradient{Param: p.Name, Acc: optim.GradName(p.Name), Out: out})
	}
	delete(g.Domains, "com.microsoft")
	for d := range g.Domains {
		delete(g.Domains, d) // nothing of the training domains is left
	}
	g.Prune()
	if b.Err != nil {
		return nil, b.Err
	}
	return g, g.Sort()
}

// evalGraph names the eval model's scalar output loss.
func evalGraph(g *graph.Graph) (*graph.Graph, error) {
	g = g.Clone()
	g.Name = "eval"
	for _, o := range g.Outputs {
		if g.Info(o).Float() && numel(g.Info(o)) == 1 {
			graph.NewBuilder(g, "").OpInto(loss.Name, "Identity", []string{o})
			rest := slices.DeleteFunc(slices.Clone(g.Outputs), func(s string) bool { return s == o })
			g.Outputs = append([]string{loss.Name}, rest...)
			return g, nil
		}
	}
	return nil, &FormatError{"eval_model.onnx", "no scalar loss output"}
}

func numel(i graph.Info) int64 {
	if !i.Static() {
		return -1
	}
	return ort.Numel(i.Shape)
}
