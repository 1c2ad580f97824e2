package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/plan"
	"github.com/ortrain/ortrain/training/telemetry"
)

func planCommand() *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "show what a run would do, without training and without a GPU",
		UsageText: "ortrain plan (--config CONFIG | --preset NAME) [--set key=value]... [--json]",
		Description: `Resolves the configuration and prints the run directory, device and
precision, the model's parameter count and the device memory of its training
state, the data paths and sample counts, the batch and learning-rate
arithmetic with the LR at a few steps, the run length, the validation and
checkpoint cadence, and the loader's host-memory plan. Parts that need the
data say why they are unknown when it is not there. With --memory it also
names every tensor of the training graph at the batch with more than
2^31 − 1 elements (node, op, shape, elements), which ONNX Runtime's CUDA
kernels cannot take, and says what to change. Exit 0 for a valid
configuration (even without data), 2 for a bad one or one train would refuse
(a loader over data.memory_limit or, with 0, over the machine's memory; on a
CUDA device, a tensor over 2^31 − 1 elements). With --gpu (or --step-time)
it predicts the step's time on that GPU: each node's FLOPs and bytes at the
batch, at its op class's efficiency (fitted on profiles of ResNet-50, the
diffusion LM and the 3-D VQ-GAN on an H200), a launch per kernel, and the
host's part. Against steps measured on that H200 (2026-11-26) it was 7%
short for ResNet-50, 2 to 3% over for the diffusion LM and 5 to 9% over
for the VQ-GAN. A bf16-mixed model with convolutions also gets its step
in 16-mixed: the CUDA provider's Conv has no bfloat16 kernel, so bf16-mixed
runs them in float32.

Examples:
   ortrain plan --preset vqgan3d-h200
   ortrain plan --preset resnet50-a10g-balanced --set data.train=/data/imagenet/train --set data.val=/data/imagenet/val
   ortrain plan --config run.toml --set data.batch_size=8 --json
   ortrain plan --preset bd3lm-gsm8k-h200 --memory --set model.recompute=blocks
   ortrain plan --config run.toml --memory --probe 2
   ortrain plan --preset resnet50-a10g-balanced --memory --gpu-memory 23GiB
   ortrain plan --preset resnet50-a10g-balanced --gpu h200`,
		Flags: append(configFlags(), &cli.BoolFlag{Name: "json", Usage: "write the plan as JSON"},
			&cli.BoolFlag{Name: "memory", Usage: "also build the training graph (in a temporary directory) and replay a step at the batch size: activation memory at the peak, and tensors too large for CUDA's kernels"},
			&cli.StringFlag{Name: "gpu-memory", Usage: "with --memory, the largest batch per device whose step fits in `SIZE` (\"23GiB\"); default with a CUDA device: its memory, when NVML sees it"},
			&cli.IntFlag{Name: "probe", Usage: "with --memory, also run a training step at batch `N` on this machine's CPU, measure ONNX Runtime's allocator peak and calibrate the replay with it (0: none)"},
			&cli.StringFlag{Name: "gpu", Usage: "also predict the training step's time on `GPU` (h100, h200, a100, a10g) from the graphs' shapes at the batch; --step-time picks it from the configuration's name (else h200)"},
			&cli.BoolFlag{Name: "step-time", Usage: "predict the training step's time on the GPU the configuration's name mentions (h100, h200, a100, a10g; else h200)"}),
		Action: func(c *cli.Context) error {
			cfg, err := readConfig(c)
			if err != nil {
				return err
			}
			if _, err := plan.Resolve(cfg); err != nil {
				return err
			}
			p, err := plan.Make(cfg)
			if err != nil {
				return err
			}
			for _, f := range []string{"probe", "gpu-memory"} {
				if c.IsSet(f) && !c.Bool("memory") {
					return usageError{fmt.Errorf("plan: --%s works on what --memory replays: give both", f)}
				}
			}
			if c.Int("probe") < 0 {
				return usageError{fmt.Errorf("plan: --probe %d: want a batch size ≥ 1", c.Int("probe"))}
			}
			if c.Bool("memory") {
				if err := loadORT(c, cfg.ORTLib); err != nil {
					return err
				}
				mo := plan.MemoryOptions{ProbeBatch: c.Int("probe")}
				if v := c.String("gpu-memory"); v != "" {
					n, err := config.ParseByteSize(v)
					if err != nil || n <= 0 {
						return usageError{fmt.Errorf("plan: --gpu-memory %q: want a size such as 23GiB", v)}
					}
					mo.DeviceBytes, mo.Device = int64(n), "--gpu-memory"
				} else if dev, err := ort.ParseDevice(cfg.Trainer.Device); err == nil && dev.CUDA {
					if d, ok := telemetry.DeviceFor(dev.ID); ok {
						mo.DeviceBytes, mo.Device = int64(d.MemoryTotal), fmt.Sprintf("%v (%s)", dev, d.Name)
					}
				}
				if err := p.MeasureActivations(cfg, ort.Options{}, mo); err != nil {
					return err
				}
			}
			var step *plan.StepTime
			if c.IsSet("gpu") || c.Bool("step-time") {
				gpu := plan.DefaultGPU(cfg.Name)
				if c.IsSet("gpu") {
					if gpu, err = plan.LookupGPU(c.String("gpu")); err != nil {
						return usageError{fmt.Errorf("plan: --gpu: %v", err)}
					}
				}
				if err := loadORT(c, cfg.ORTLib); err != nil {
					return err
				}
				if step, err = plan.PredictStep(cfg, gpu); err != nil {
					return err
				}
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				err = enc.Encode(struct {
					*plan.Plan
					StepTime *plan.StepTime `json:"step_time,omitempty"`
				}{p, step})
			} else {
				err = p.WriteText(c.App.Writer)
				if err == nil && step != nil {
					step.WriteText(c.App.Writer, 6)
				}
			}
			if err == nil && len(p.Refusals) > 0 {
				err = usageError{fmt.Errorf("train would refuse this configuration: %s", strings.Join(p.Refusals, "; "))}
			}
			return err
		},
	}
}
