package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/loss"
	"github.com/ortrain/ortrain/training/optim"
	"github.com/ortrain/ortrain/training/ortimport"
	"github.com/ortrain/ortrain/training/precision"
)

func artifactsCommand() *cli.Command {
	return &cli.Command{
		Name:  "artifacts",
		Usage: "build training artifacts from a forward ONNX model, or inspect them",
		Subcommands: []*cli.Command{
			{
				Name:      "build",
				Usage:     "derive the training, eval and optimizer graphs and the initial weights",
				UsageText: "ortrain artifacts build --model fwd.onnx --out DIR [options]",
				Description: `Reads a forward model (torch.onnx.export output, or a recipe's), adds the
loss, differentiates it with respect to the trainable initializers and writes
training.onnx, eval.onnx, optimizer.onnx, weights.safetensors and
manifest.json (spec: training/artifacts/SPEC.md). Only stock ONNX Runtime ops.

Examples:
   ortrain artifacts build --model resnet18.onnx --loss cross_entropy --label-smoothing 0.1 \
       --optimizer sgd --lr 0.5 --momentum 0.9 --nesterov --weight-decay 5e-5 --out artifacts/resnet18
   ortrain artifacts build --model vqgan.onnx --loss output:loss --frozen 'encoder.*' --out artifacts/vq`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "model", Required: true, Usage: "forward ONNX model"},
					&cli.StringFlag{Name: "out", Required: true, Usage: "artifact directory to write"},
					&cli.BoolFlag{Name: "overwrite", Usage: "replace the artifact files in a non-empty --out"},
					&cli.StringFlag{Name: "loss", Usage: loss.Usage, DefaultText: "the model's scalar output named loss"},
					&cli.Float64Flag{Name: "label-smoothing", Usage: "for cross_entropy"},
					&cli.StringSliceFlag{Name: "trainable", Usage: "glob over initializer names: only these train (repeatable)"},
					&cli.StringSliceFlag{Name: "frozen", Usage: "glob over initializer names that never train; wins over --trainable (repeatable)"},
					&cli.StringSliceFlag{Name: "stop-gradient", Usage: "a tensor no gradient flows back through, as .detach() would (repeatable)"},
					&cli.StringSliceFlag{Name: "input-shape", Usage: "fix an input's sizes, NAME=D1xD2x... with -1 for a free dimension (image=-1x3x224x224), for rules that need static sizes (repeatable)"},
					&cli.StringFlag{Name: "precision", Value: "fp32", Usage: "fp32, or bf16 / fp16 for mixed precision (low-precision matrix products and what follows them, float32 master weights, optimizer and fragile ops)"},
					&cli.StringFlag{Name: "device", Value: "cpu", Usage: "with --precision: the device whose kernels decide what runs in low precision (cpu, cuda:N); ops without a kernel stay float32, matrix products are emulated"},
					&cli.Int64Flag{Name: "seed", Usage: "seeds the training graph's random nodes (Dropout masks); a run on these artifacts must use the same seed"},
					&cli.StringFlag{Name: "conv-grad", DefaultText: "offsets on the CPU, gemm on CUDA", Usage: "how convolution gradients are written: ops (one ConvTranspose and one Conv or Gemm per convolution: fewer nodes), offsets (the input gradient a Conv, the weight gradient a GEMM over the kernel offsets' windows: measured faster on ONNX Runtime's CPU provider and on an H200) or gemm (the offsets form's weight gradient, a volume's batched over its depth; an image's input gradient one ConvTranspose, cuDNN's backward-data, a volume's a Conv); the same values in every form"},
					&cli.StringFlag{Name: "recompute", Value: autodiff.RecomputeCheap, Usage: "what the backward recomputes instead of keeping: " + strings.Join(autodiff.RecomputePolicies, ", ") + " (blocks: activation checkpointing); gradients are the same"},
					&cli.StringFlag{Name: "optimizer", Value: "adamw", Usage: "adamw or sgd"},
					&cli.Float64Flag{Name: "lr", Usage: "default learning rate recorded in the manifest (the graph takes lr as an input)", DefaultText: optimDefault(func(c optim.Config) float64 { return c.LR })},
					&cli.Float64Flag{Name: "weight-decay", Usage: "decoupled (adamw) or L2 (sgd) weight decay", DefaultText: optimDefault(func(c optim.Config) float64 { return c.WeightDecay })},
					&cli.Float64Flag{Name: "beta1", Usage: "adamw", DefaultText: optimDefault(func(c optim.Config) float64 { return c.Beta1 })},
					&cli.Float64Flag{Name: "beta2", Usage: "adamw", DefaultText: optimDefault(func(c optim.Config) float64 { return c.Beta2 })},
					&cli.Float64Flag{Name: "eps", Usage: "adamw", DefaultText: optimDefault(func(c optim.Config) float64 { return c.Eps })},
					&cli.Float64Flag{Name: "momentum", Usage: "sgd", DefaultText: optimDefault(func(c optim.Config) float64 { return c.Momentum })},
					&cli.BoolFlag{Name: "nesterov", Usage: "sgd"},
				},
				Action: artifactsBuild,
			},
			{
				Name:      "import",
				Usage:     "turn ONNX Runtime's generate_artifacts output into ortrain artifacts for a stock ONNX Runtime",
				UsageText: "ortrain artifacts import --ort DIR --out DIR [--overwrite]",
				Description: `DIR holds training_model.onnx, eval_model.onnx, optimizer_model.onnx and
checkpoint as onnxruntime.training.artifacts.generate_artifacts wrote them.
Every training-only com.microsoft op (ConvGrad, ReluGrad, InPlaceAccumulatorV2,
AdamWOptimizer, ...) is lowered to standard ops, and the checkpoint's
parameters become weights.safetensors. An op ortrain cannot lower is named in
the error.

Example:
   ortrain artifacts import --ort ort_artifacts/ --out artifacts/imported`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "ort", Required: true, Usage: "the folder generate_artifacts wrote"},
					&cli.StringFlag{Name: "out", Required: true, Usage: "artifact directory to write"},
					&cli.BoolFlag{Name: "overwrite", Usage: "replace the artifact files in a non-empty --out"},
				},
				Action: func(c *cli.Context) error {
					if err := loadORT(c, ""); err != nil {
						return err
					}
					m, err := ortimport.Import(ortimport.Options{Dir: c.String("ort"), Out: c.String("out"), Overwrite: c.Bool("overwrite")})
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "wrote %s: %d parameters in %d tensors, optimizer %s\n", c.String("out"), m.ParamCount(), len(m.Params), m.Optimizer.Kind)
					return nil
				},
			},
			{
				Name:      "inspect",
				Usage:     "parameter count, graph inputs and outputs, ops, and ops without a kernel; with --memory, where a training step's memory goes",
				UsageText: "ortrain artifacts inspect [--memory --batch N] DIR",
				Description: `--memory replays the training graph in ONNX Runtime's execution order at
batch N and prints the activation memory at the peak of a step, which values
make it up (largest first, by producing node), and the training state.

Examples:
   ortrain artifacts inspect artifacts/
   ortrain artifacts inspect --memory --batch 32 artifacts/`,
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "memory", Usage: "attribute a training step's peak memory to the values and nodes that hold it"},
					&cli.IntFlag{Name: "batch", Value: 1, Usage: "batch size for --memory"},
				},
				Action: artifactsInspect,
			},
		},
	}
}

func artifactsBuild(c *cli.Context) error {
	// A CUDA device loads ONNX Runtime's CUDA build: its kernels are what
	// the probe asks for.
	if err := loadORTOn(c, "", c.String("device")); err != nil {
		return err
	}
	shapes := map[string][]int64{}
	for _, a := range c.StringSlice("input-shape") {
		name, dims, err := artifacts.ParseInputShape(a)
		if err != nil {
			return err
		}
		shapes[name] = dims
	}
	low, mixed, err := precision.Parse(c.String("precision"))
	if err != nil {
		return usageError{err}
	}
	dev, err := ort.ParseDevice(c.String("device"))
	if err != nil {
		return usageError{err}
	}
	var probe *precision.Probe
	if mixed {
		// Without a usable GPU every probe would fail and every product
		// be emulated: artifacts for a GPU that would run float32 kernels
		// on it. Refused instead.
		if err := usableDevice("--device", ort.Options{Device: dev}); err != nil {
			return fmt.Errorf("%w: --precision %s decides what runs in low precision from the device's kernels; build on a machine with the GPU, or let ortrain train build the artifacts there", err, c.String("precision"))
		}
		probe = precision.NewProbe(ort.Options{Device: dev}, graph.EmitOpset)
	}
	conv := autodiff.ConvFormFor(dev.CUDA)
	if c.IsSet("conv-grad") {
		if conv, err = autodiff.ParseConvForm(c.String("conv-grad")); err != nil || conv == "" {
			return usageError{fmt.Errorf("--conv-grad %q: want ops, offsets or gemm", c.String("conv-grad"))}
		}
	}
	m, err := artifacts.Build(artifacts.Options{
		Precision:      low,
		Probe:          probe,
		InputShapes:    shapes,
		Model:          c.String("model"),
		Out:            c.String("out"),
		Overwrite:      c.Bool("overwrite"),
		Loss:           c.String("loss"),
		LabelSmoothing: c.Float64("label-smoothing"),
		Trainable:      c.StringSlice("trainable"),
		Frozen:         c.StringSlice("frozen"),
		StopGradient:   c.StringSlice("stop-gradient"),
		Recompute:      c.String("recompute"),
		ConvForm:       conv,
		CUDA:           dev.CUDA,
		Seed:           c.Int64("seed"),
		Optimizer:      optimizerFlags(c),
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "wrote %s: %d parameters in %d tensors, loss %s, optimizer %s\n",
		c.String("out"), m.ParamCount(), len(m.Params), m.LossSpec.Kind, m.Optimizer.Kind)
	printBuilt(c.App.Writer, c.App.ErrWriter, m)
	if mixed {
		fmt.Fprintf(c.App.Writer, "precision: %s\n", m.Precision)
	}
	return nil
}

// printBuilt says what the artifacts train (ONNX cannot tell a parameter
// from a buffer, so the user checks the list), what they keep fixed, what
// the loss reads, and the build's warnings (to errw).
func printBuilt(w, errw io.Writer, m *artifacts.Manifest) {
	fmt.Fprintf(w, "loss: %s\n", loss.Describe(m.Outputs, m.LossSpec))
	tensors := func(ts []artifacts.Tensor) string {
		var s []string
		for _, t := range ts {
			s = append(s, fmt.Sprintf("%s %v", t.Name, t.Shape))
		}
		return shortList(s)
	}
	fmt.Fprintf(w, "trained (%d): %s\n", len(m.Params), tensors(m.Params))
	if len(m.Frozen) > 0 {
		fmt.Fprintf(w, "frozen (%d): %s\n", len(m.Frozen), tensors(m.Frozen))
	}
	if len(m.Buffers) > 0 {
		var s []string
		for _, b := range m.Buffers {
			s = append(s, b.Name)
		}
		fmt.Fprintf(w, "buffers, updated by the forward pass (%d): %s\n", len(m.Buffers), shortList(s))
	}
	for _, warn := range m.Warnings {
		fmt.Fprintf(errw, "ortrain: warning: %s\n", warn)
	}
}

// shortList joins up to 24 items and counts the rest (manifest.json lists
// them all).
func shortList(s []string) string {
	const most = 24
	if len(s) <= most {
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s and %d more (manifest.json lists all)", strings.Join(s[:most], ", "), len(s)-most)
}

// optimDefault is a flag's default, per optimizer where both have one, for
// --help ("0.001 for adamw, 0.1 for sgd"; "0.9").
func optimDefault(field func(optim.Config) float64) string {
	var s []string
	var only float64
	for _, k := range []string{optim.AdamW, optim.SGD} {
		if v := field(optim.Config{Kind: k}.Defaults()); v != 0 {
			s = append(s, fmt.Sprintf("%g for %s", v, k))
			only = v
		}
	}
	if len(s) == 1 {
		return fmt.Sprintf("%g", only)
	}
	return strings.Join(s, ", ")
}

// optimizerFlags starts from the optimizer's defaults and applies the
// flags the user gave, so that an explicit --weight-decay 0 means zero.
func optimizerFlags(c *cli.Context) optim.Config {
	oc := optim.Config{Kind: c.String("optimizer")}.Defaults()
	for _, f := range []struct {
		flag string
		dst  *float64
	}{{"lr", &oc.LR}, {"weight-decay", &oc.WeightDecay}, {"beta1", &oc.Beta1}, {"beta2", &oc.Beta2}, {"eps", &oc.Eps}, {"momentum", &oc.Momentum}} {
		if c.IsSet(f.flag) {
			*f.dst = c.Float64(f.flag)
		}
	}
	oc.Nesterov = c.Bool("nesterov")
	oc.Exact = true
	return oc
}

func artifactsInspect(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError{fmt.Errorf("artifacts inspect takes one artifact directory, got %d arguments", c.NArg())}
	}
	if c.Bool("memory") {
		if c.Int("batch") < 1 {
			return usageError{fmt.Errorf("artifacts inspect: --batch must be >= 1")}
		}
		r, err := artifacts.Memory(c.Args().First(), int64(c.Int("batch")))
		if err != nil {
			return err
		}
		fmt.Fprint(c.App.Writer, r.String())
		return nil
	}
	if err := loadORT(c, ""); err != nil {
		return err
	}
	r, err := artifacts.Inspect(c.Args().First())
	if err != nil {
		return err
	}
	fmt.Fprint(c.App.Writer, r.String())
	return nil
}
