package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/eval/report"
	"github.com/ortrain/ortrain/eval/sliding"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/rundir"
)

func quickstartCommand() *cli.Command {
	return &cli.Command{
		Name:      "quickstart",
		Usage:     "train a small 3D VQ-GAN on the CPU, evaluate it and write the report, in a few minutes",
		UsageText: "ortrain quickstart [--set key=value]...",
		Description: `Runs the embedded quickstart preset end to end: writes noisy 3D phantoms
(and, with Debian's mricron-data installed, real T1 MRI at 2 mm) to
outputs/quickstart-data, trains a ~63k-parameter VQ-GAN for 400 steps, then
reconstructs the validation volumes whole with the first and the last
checkpoint and writes outputs/quickstart/version_N/report.html: loss curves,
PSNR/SSIM, and slices of input, reconstruction and error for both.

Examples:
   ortrain quickstart
   ortrain quickstart --set trainer.max_steps=100`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "set", Usage: "override a key of the quickstart preset (repeatable)"},
		},
		Action: quickstart,
	}
}

func quickstart(c *cli.Context) error {
	start := time.Now()
	cfg, err := configs.Load("quickstart")
	if err != nil {
		return err
	}
	if err := cfg.Override(c.StringSlice("set")...); err != nil {
		return err
	}
	real, err := configs.PrepareQuickstart(cfg.Data.Train, cfg.Data.Val)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "ortrain: quickstart data in %s (phantoms; real MRI: %d volumes)\n", filepath.Dir(cfg.Data.Train), len(real))
	if err := cfg.Resolve(); err != nil {
		return err
	}
	run, err := train(c, cfg, "", "", false)
	if err != nil {
		return err
	}
	m, err := checkpoint.NewManager(filepath.Join(run, rundir.CheckpointsDir), -1, "", "")
	if err != nil {
		return err
	}
	entries := m.Entries()
	if len(entries) == 0 {
		return fmt.Errorf("%s: the run left no checkpoint to evaluate", run)
	}
	picks := []checkpoint.Entry{entries[0]}
	if len(entries) > 1 {
		picks = append(picks, entries[len(entries)-1])
	}
	r, err := eval.RunReport(run, []report.KV{{Key: "ortrain", Value: version}, {Key: "ONNX Runtime", Value: ort.Version()}, {Key: "device", Value: cfg.Trainer.Device}})
	if err != nil {
		return err
	}
	r.Title = "ortrain quickstart: a 3D VQ-GAN on the CPU"
	for _, e := range picks {
		res, err := eval.EvaluateCheckpoint(c.Context, eval.CheckpointOptions{Checkpoint: e.Dir, Overlap: 0.25, Mode: sliding.Gaussian, BatchSize: 4})
		if err != nil {
			return err
		}
		for i, v := range res.Reports {
			v.Name = fmt.Sprintf("%s at step %d", filepath.Base(v.Name), res.Step)
			v.Group = fmt.Sprintf("checkpoint of step %d", res.Step)
			r.Volumes = append(r.Volumes, v)
			v := res.Volumes[i]
			ssim := "not computed"
			if v.SSIM != nil {
				ssim = fmt.Sprintf("%.4f", *v.SSIM)
			}
			fmt.Fprintf(c.App.Writer, "step %4d  %-28s PSNR %6.2f dB  SSIM %s\n", res.Step, filepath.Base(v.Name), v.PSNR, ssim)
		}
	}
	r.MetricOrder = []string{"PSNR", "SSIM", "MS-SSIM", "MAE"}
	out := filepath.Join(run, "report.html")
	if err := report.Write(out, r, true); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "report: %s (%s in all)\n", out, time.Since(start).Round(time.Second))
	return nil
}
