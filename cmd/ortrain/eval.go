package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/eval/report"
)

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:      "eval",
		Usage:     "compare a reconstructed volume with its reference: PSNR, SSIM, MS-SSIM",
		UsageText: "ortrain eval --input recon.nii.gz --reference ref.nii.gz [--data-range R] [--json] [--report out.html]",
		Description: `Metrics are computed on the whole volume in the reference's intensity units:
PSNR with the data range (the reference's max - min unless --data-range is
given), SSIM in 3-D with a Gaussian window (sigma 1.5, K1 0.01, K2 0.03, as
scikit-image's structural_similarity with gaussian_weights=True and
use_sample_covariance=False), MS-SSIM (5 scales, as torchmetrics; needs 176
voxels on every axis), MAE and MSE.

Examples:
   ortrain eval --input recon.nii.gz --reference ct.nii.gz
   ortrain eval --input recon.nii.gz --reference ct.nii.gz --data-range 4095 --json
   ortrain eval --input recon.nii.gz --reference ct.nii.gz --report recon.html`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "input", Usage: "the reconstruction (NIfTI .nii or .nii.gz)"},
			&cli.StringFlag{Name: "reference", Usage: "the reference volume (NIfTI)"},
			&cli.Float64Flag{Name: "data-range", Usage: "intensity range for PSNR and SSIM (default: the reference's max - min)"},
			&cli.BoolFlag{Name: "json", Usage: "print the metrics as JSON"},
			&cli.StringFlag{Name: "report", Usage: "also write an HTML report with slices and error maps to this file"},
			&cli.StringFlag{Name: "checkpoint", Usage: "evaluate a training checkpoint (not built yet)"},
		},
		Action: evalAction,
	}
}

func evalAction(c *cli.Context) error {
	if c.IsSet("checkpoint") {
		return cli.Exit("`ortrain eval --checkpoint` is not built yet (evaluation of checkpoints, issue 7); nothing was done", 1)
	}
	if c.String("input") == "" || c.String("reference") == "" {
		return usageError{fmt.Errorf("eval needs --input and --reference (see ortrain eval --help)")}
	}
	if c.Float64("data-range") < 0 {
		return usageError{fmt.Errorf("--data-range must be positive, got %g", c.Float64("data-range"))}
	}
	m, entry, err := eval.CompareFiles(c.String("input"), c.String("reference"), c.Float64("data-range"))
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(m); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "%s against %s (%d×%d×%d, data range %g)\n", c.String("input"), c.String("reference"), m.Shape[0], m.Shape[1], m.Shape[2], m.DataRange)
		fmt.Fprintf(w, "PSNR     %.4f dB\nSSIM     %.6f\n", m.PSNR, m.SSIM)
		if m.MSSSIM != nil {
			fmt.Fprintf(w, "MS-SSIM  %.6f\n", *m.MSSSIM)
		} else {
			fmt.Fprintf(w, "MS-SSIM  %s\n", m.MSSSIMNote)
		}
		fmt.Fprintf(w, "MAE      %.6g\nMSE      %.6g\n", m.MAE, m.MSE)
	}
	if path := c.String("report"); path != "" {
		r := report.Report{
			Title:       "Reconstruction of " + c.String("reference"),
			Generated:   time.Now(),
			Volumes:     []report.VolumeResult{entry},
			MetricOrder: []string{"PSNR", "SSIM", "MS-SSIM", "MAE"},
			Env:         []report.KV{{Key: "ortrain", Value: version}, {Key: "input", Value: c.String("input")}, {Key: "reference", Value: c.String("reference")}},
		}
		if err := report.Write(path, r); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", path)
	}
	return nil
}
