package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/eval/report"
	"github.com/ortrain/ortrain/eval/sliding"
	"github.com/ortrain/ortrain/metrics"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/logging"
	"github.com/ortrain/ortrain/training/rundir"
)

func quickstartCommand() *cli.Command {
	return &cli.Command{
		Name:      "quickstart",
		Usage:     "train a small 3D VQ-GAN on the CPU, evaluate it and write the report, in a few minutes",
		UsageText: "ortrain quickstart [--set key=value]...",
		Description: `Runs the embedded quickstart preset end to end: writes noisy 3D phantoms
(and, with Debian's mricron-data installed, real T1 MRI at 2 mm) to
outputs/quickstart-data, trains a ~61k-parameter VQ-GAN for 400 steps, then
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
	if t, line, err := codebookTable(run, models.CodebookSize(cfg.Model.Recipe, cfg.Model.Params)); err != nil {
		return err
	} else if len(t.Rows) > 0 {
		r.Tables = append([]report.Table{t}, r.Tables...)
		fmt.Fprintln(c.App.Writer, line)
	}
	out := filepath.Join(run, "report.html")
	if err := report.Write(out, r, true); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "report: %s (%s in all)\n", out, time.Since(start).Round(time.Second))
	return nil
}

// codebookTable is the run's validation PSNR and SSIM beside the codebook's
// usage and perplexity at each validation (of K codes), from its
// metrics.csv, and a line saying the last: a VQ-GAN whose reconstructions
// stall is first checked for a collapsed codebook (few codes in use, a
// perplexity far below K).
func codebookTable(run string, K int64) (report.Table, string, error) {
	t := report.Table{Title: "Validation: reconstruction and codebook", Columns: []string{"step", "val/psnr (dB)", "val/ssim", "codebook usage", "perplexity"}}
	series, err := logging.ReadCSV(filepath.Join(run, "metrics.csv"))
	if err != nil {
		return t, "", err
	}
	byName := map[string]map[float64]float64{}
	for _, s := range series {
		m := map[float64]float64{}
		for i, step := range s.Step {
			m[step] = s.Value[i]
		}
		byName[s.Name] = m
	}
	usage := byName[metrics.ValCodebookUsage]
	var steps []float64
	for step := range usage {
		steps = append(steps, step)
	}
	slices.Sort(steps)
	cell := func(name string, step float64, format string) string {
		if v, ok := byName[name][step]; ok {
			return fmt.Sprintf(format, v)
		}
		return "-"
	}
	of := ""
	if K > 0 {
		of = fmt.Sprintf(" of %d", K)
	}
	line := ""
	for _, step := range steps {
		t.Rows = append(t.Rows, []string{fmt.Sprintf("%.0f", step), cell(metrics.ValPSNR, step, "%.2f"), cell(metrics.ValSSIM, step, "%.4f"),
			cell(metrics.ValCodebookUsage, step, "%.3f"), cell(metrics.ValCodebookPerplexity, step, "%.1f") + of})
		line = fmt.Sprintf("step %4d  codebook (validation): %.1f %% of the codes used, perplexity %s%s", int64(step), 100*usage[step],
			cell(metrics.ValCodebookPerplexity, step, "%.1f"), of)
	}
	return t, line, nil
}
