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
)

func benchCommand() *cli.Command {
	var names []string
	for _, c := range bench.Cases {
		names = append(names, c.Name)
	}
	return &cli.Command{
		Name:      "bench",
		Usage:     "measure training memory per sample, next to PyTorch eager on the same machine",
		UsageText: "ortrain bench [--case NAME]... [--torch] [--steps N]",
		Description: `Runs ` + "`ortrain train`" + ` on synthetic data for a few steps at two batch sizes,
each in its own process, and reads each process's peak resident memory and
the step's peak in ONNX Runtime's allocator (memory/step_peak_bytes);
the slope between the two batch sizes is the memory per sample. With --torch the recipe's
PyTorch twin (models/pytorch/bench_memory.py, eager, same optimizer) runs
beside it and the ratio is printed. CPU only.

Cases: ` + strings.Join(names, ", ") + `.

Examples:
   ortrain bench --torch
   ortrain bench --case resnet50 --torch
   ortrain bench --case bd3lm --recompute blocks`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "case", Usage: "a case to run (repeatable); default all"},
			&cli.BoolFlag{Name: "torch", Usage: "also run the PyTorch twin"},
			&cli.StringFlag{Name: "python", Value: "/usr/bin/python3", Usage: "interpreter with PyTorch, for --torch"},
			&cli.IntFlag{Name: "steps", Value: 2, Usage: "training steps per process"},
			&cli.StringFlag{Name: "recompute", Value: autodiff.RecomputeCheap, Usage: "ortrain's model.recompute: " + strings.Join(autodiff.RecomputePolicies, ", ")},
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
	if c.Int("steps") < 1 {
		return usageError{fmt.Errorf("bench: --steps must be >= 1")}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ortrain-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if !slices.Contains(autodiff.RecomputePolicies, c.String("recompute")) {
		return usageError{fmt.Errorf("bench: --recompute %q is not one of %s", c.String("recompute"), strings.Join(autodiff.RecomputePolicies, ", "))}
	}
	o := bench.Options{Ortrain: self, Steps: c.Int("steps"), Dir: dir, Log: c.App.ErrWriter, Recompute: c.String("recompute")}
	if c.Bool("torch") {
		o.Python = c.String("python")
		o.Script = filepath.Join(filepath.Dir(filepath.Dir(self)), "models", "pytorch", "bench_memory.py")
		if _, err := os.Stat(o.Script); err != nil {
			return usageError{fmt.Errorf("bench: --torch needs the PyTorch twin at %s (run bin/ortrain from the repository): %v", o.Script, err)}
		}
	}
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
