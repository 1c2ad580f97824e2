package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/eval/report"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "write a run's HTML report: loss and metric curves, last values, eval results, config",
		UsageText: "ortrain report RUN_DIR [--out FILE] [--overwrite]",
		Description: `RUN_DIR is a run's version directory (outputs/<name>/version_N). The report
is one self-contained HTML file, images embedded, no network needed. It
holds the curves of metrics.csv (byte counts in MB or GiB, PSNR in dB), the
last value of every metric, the results of each ortrain eval --checkpoint
written into the run (RUN_DIR/eval/<checkpoint>/metrics.json and
metrics.csv), and the resolved config.

Example:
   ortrain report outputs/quickstart/version_0`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "the HTML file to write (default RUN_DIR/report.html)"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace an existing report file"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{fmt.Errorf("report takes one run directory, got %d arguments", c.NArg())}
			}
			dir := c.Args().First()
			out := c.String("out")
			if out == "" {
				out = filepath.Join(dir, "report.html")
			}
			if _, err := os.Stat(out); err == nil && !c.Bool("overwrite") {
				return usageError{fmt.Errorf("%s exists; pass --overwrite to replace it", out)}
			}
			r, err := eval.RunReport(dir, []report.KV{{Key: "ortrain", Value: version}})
			if err != nil {
				return err
			}
			if err := report.Write(out, r, c.Bool("overwrite")); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "wrote %s\n", out)
			return nil
		},
	}
}
