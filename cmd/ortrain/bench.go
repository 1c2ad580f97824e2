package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/bench"
	"github.com/ortrain/ortrain/training/config"
)

func benchCommand() *cli.Command {
	var names []string
	for _, c := range bench.Cases {
		names = append(names, c.Name)
	}
	return &cli.Command{
		Name:      "bench",
		Usage:     "measure training speed (or --memory: memory per sample), next to the PyTorch twins on the same machine",
		UsageText: "ortrain bench [--case NAME]... [--device cpu|cuda:N] [--precision P] [--size small|users] [--torch] [--profile] [--memory]",
		Description: `Speed (the default): trains each case on synthetic data in its own
` + "`ortrain train`" + ` process, --warmup steps and then --steps measured ones, and prints
samples/s (and token positions/s for the language model), the step time,
the host's part of it (outside ONNX Runtime's runs and the wait for data),
the data-wait share, the training graph's peak in ONNX Runtime's allocator
(the device's arena on a GPU) and the process's peak resident memory. With
--torch, the recipe's PyTorch twin (models/pytorch/bench_speed.py) trains the
same model, batch and optimizer on one batch made on the device, in eager
float32 (TF32 on a GPU unless --precision is strict "32"), eager with
autocast (bf16, or fp16 with a scaler for 16-mixed) and torch.compile at
--precision (where PyTorch has it), and each twin's line gives ortrain's
throughput over the twin's. --size small (the default on the CPU) runs the
cases at sizes a 2-core machine measures in minutes; --size users (the
default on a GPU) at the presets' models and batches. --profile trains each
case once more under ONNX Runtime's profiler and prints where its measured
steps go: kernel time per step by op, and the slowest nodes with the
shapes they wrote (on a GPU with synchronous launches, so that each node's
time is its own kernels').

--memory: runs each case for --steps steps at two batch sizes, each in its
own process, and reads each process's peak resident memory and the step's
peak in ONNX Runtime's allocator (memory/step_peak_bytes); the slope between
the two batch sizes is the memory per sample. With --torch the recipe's
PyTorch twin (models/pytorch/bench_memory.py, eager) runs beside it. CPU only.

Cases: ` + strings.Join(names, ", ") + `.

Examples:
   ortrain bench --case bd3lm --torch
   ortrain bench --device cuda:0 --precision bf16-mixed --torch
   ortrain bench --device cuda:0 --case resnet50 --batch 128
   ortrain bench --device cuda:0 --case resnet50 --precision 16-mixed --set model.conv_grad=offsets
   ortrain bench --device cuda:0 --case vqgan3d --batch 1 --precision bf16-mixed --profile
   ortrain bench --memory --torch
   ortrain bench --memory --case bd3lm --recompute blocks`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "case", Usage: "a case to run (repeatable); default all"},
			&cli.BoolFlag{Name: "memory", Usage: "measure memory per sample instead of speed"},
			&cli.BoolFlag{Name: "torch", Usage: "also run the PyTorch twins"},
			&cli.BoolFlag{Name: "profile", Usage: "train each case once more with ONNX Runtime's profile and print where its measured steps go, by op (on a GPU with synchronous launches); speed runs only"},
			&cli.StringFlag{Name: "python", Value: "/usr/bin/python3", Usage: "interpreter with PyTorch, for --torch"},
			&cli.StringFlag{Name: "twins", Usage: "folder of the PyTorch twins, for --torch (default: models/pytorch beside bin/)"},
			&cli.StringSliceFlag{Name: "mode", Usage: "the twins' modes to run (repeatable): " + strings.Join(bench.TorchModes, ", ") + "; default all"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "trainer.device: cpu or cuda:N"},
			&cli.StringFlag{Name: "precision", Value: "32", Usage: "trainer.precision: 32, tf32, bf16-mixed, 16-mixed"},
			&cli.StringFlag{Name: "size", Usage: "small or users (default: small on the CPU, users on a GPU)"},
			&cli.IntFlag{Name: "batch", Usage: "samples per step (default: the size's)"},
			&cli.IntFlag{Name: "warmup", Value: 2, Usage: "steps run before the measured ones"},
			&cli.IntFlag{Name: "steps", Usage: "measured steps (default 5; with --memory, steps per process, default 2)"},
			&cli.IntFlag{Name: "workers", Value: -1, Usage: "data.num_workers (default: 0 on the CPU, 8 on a GPU)"},
			&cli.StringSliceFlag{Name: "set", Usage: "a configuration override for ortrain's runs, as train's --set (repeatable): --set model.conv_grad=offsets; speed runs only"},
			&cli.StringFlag{Name: "recompute", Usage: "model.recompute: " + strings.Join(autodiff.RecomputePolicies, ", ") + " (default: the size's; with --memory " + autodiff.RecomputeCheap + ")"},
		},
		Action: benchAction,
	}
}

func benchAction(c *cli.Context) error {
	cases := bench.Cases
	if sel := c.StringSlice("case"); len(sel) > 0 {
		cases = nil
		for _, name := range sel {
			bc, ok := bench.Lookup(name)
			if !ok {
				return usageError{fmt.Errorf("bench: unknown case %q", name)}
			}
			cases = append(cases, bc)
		}
	}
	if c.Int("steps") < 0 || c.Int("warmup") < 0 || c.Int("batch") < 0 {
		return usageError{fmt.Errorf("bench: --steps, --warmup and --batch must be >= 0")}
	}
	if r := c.String("recompute"); r != "" && !slices.Contains(autodiff.RecomputePolicies, r) {
		return usageError{fmt.Errorf("bench: --recompute %q is not one of %s", r, strings.Join(autodiff.RecomputePolicies, ", "))}
	}
	if len(c.StringSlice("set")) > 0 && c.Bool("memory") {
		return usageError{fmt.Errorf("bench: --set is for speed runs; --memory measures the cases as they are")}
	}
	if c.Bool("profile") && c.Bool("memory") {
		return usageError{fmt.Errorf("bench: --profile is for speed runs; --memory reads the allocators' peaks")}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	twins := c.String("twins")
	if twins == "" {
		twins = filepath.Join(filepath.Dir(filepath.Dir(self)), "models", "pytorch")
	}
	twin := func(script string) (string, error) {
		path, _ := filepath.Abs(filepath.Join(twins, script))
		if _, err := os.Stat(path); err != nil {
			return "", usageError{fmt.Errorf("bench: --torch needs the PyTorch twin at %s (run bin/ortrain from the repository, or give --twins): %v", path, err)}
		}
		return path, nil
	}
	if c.Bool("memory") {
		return benchMemory(c, cases, self, twin)
	}
	o := bench.SpeedOptions{Ortrain: self, Device: c.String("device"), Precision: c.String("precision"), Size: c.String("size"),
		Batch: c.Int("batch"), Warmup: c.Int("warmup"), Steps: c.Int("steps"), Workers: c.Int("workers"),
		Recompute: c.String("recompute"), Sets: c.StringSlice("set"), Profile: c.Bool("profile"), Modes: c.StringSlice("mode"), Log: c.App.ErrWriter}
	if err := checkBenchRun(&o); err != nil {
		return err
	}
	if c.Bool("torch") {
		o.Python = c.String("python")
		if o.Script, err = twin("bench_speed.py"); err != nil {
			return err
		}
		for _, m := range o.Modes {
			if !slices.Contains(bench.TorchModes, m) {
				return usageError{fmt.Errorf("bench: --mode %q is not one of %s", m, strings.Join(bench.TorchModes, ", "))}
			}
		}
		if len(o.Modes) == 0 {
			o.Modes = bench.TorchModes
		}
	}
	if o.Dir, err = os.MkdirTemp("", "ortrain-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(o.Dir)
	var results []bench.Speed
	for _, bc := range cases {
		r, err := bench.MeasureSpeed(bc, o)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	bench.SpeedTable(c.App.Writer, results)
	bench.ProfileTable(c.App.Writer, results)
	return nil
}

// checkBenchRun fills the speed benchmark's defaults that depend on the
// device and refuses a device, precision or size ortrain would refuse.
func checkBenchRun(o *bench.SpeedOptions) error {
	probe := config.Default()
	probe.Trainer.Device, probe.Trainer.Precision = o.Device, config.Precision(o.Precision)
	probe.Data.Kind, probe.Model.Recipe, probe.Trainer.MaxSteps = config.KindSynthetic, "resnet", 1
	if err := probe.Resolve(); err != nil {
		return err
	}
	gpu := strings.HasPrefix(probe.Trainer.Device, "cuda")
	switch o.Size {
	case "":
		o.Size = bench.Small
		if gpu {
			o.Size = bench.Users
		}
	case bench.Small, bench.Users:
	default:
		return usageError{fmt.Errorf("bench: --size %q is not %s or %s", o.Size, bench.Small, bench.Users)}
	}
	if o.Steps == 0 {
		o.Steps = 5
	}
	if o.Workers < 0 {
		o.Workers = 0
		if gpu {
			o.Workers = 8
		}
	}
	return nil
}

func benchMemory(c *cli.Context, cases []bench.Case, self string, twin func(string) (string, error)) error {
	if c.IsSet("device") && c.String("device") != "cpu" {
		return usageError{fmt.Errorf("bench: --memory measures the CPU's resident memory; --device %s is not built for it", c.String("device"))}
	}
	for _, name := range []string{"precision", "size", "batch", "warmup", "workers", "mode", "twins"} {
		if c.IsSet(name) {
			return usageError{fmt.Errorf("bench: --%s is not used by --memory (fp32, the cases' two batch sizes)", name)}
		}
	}
	o := bench.Options{Ortrain: self, Steps: c.Int("steps"), Log: c.App.ErrWriter, Recompute: c.String("recompute")}
	if o.Steps == 0 {
		o.Steps = 2
	}
	if o.Recompute == "" {
		o.Recompute = autodiff.RecomputeCheap
	}
	var err error
	if c.Bool("torch") {
		o.Python = c.String("python")
		if o.Script, err = twin("bench_memory.py"); err != nil {
			return err
		}
	}
	if o.Dir, err = os.MkdirTemp("", "ortrain-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(o.Dir)
	var results []bench.Result
	for _, bc := range cases {
		r, err := bench.Memory(bc, o)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	bench.Table(c.App.Writer, results)
	return nil
}
