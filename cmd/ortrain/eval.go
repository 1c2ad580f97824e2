package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/eval/report"
	"github.com/ortrain/ortrain/eval/sliding"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data/volumes"
	"github.com/ortrain/ortrain/training/rundir"
	"github.com/ortrain/ortrain/training/safefile"
)

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "evaluate a checkpoint, or compare a reconstructed volume with its reference",
		UsageText: `ortrain eval --checkpoint PATH [--config C] [--input vol.nii.gz [--out recon.nii.gz]] [options]
ortrain eval --input recon.nii.gz --reference ref.nii.gz [--data-range R] [--json] [--out-dir D] [--report out.html]`,
		Description: `With --checkpoint: loads the eval graph and the checkpoint's weights (the
config saved in the checkpoint unless --config is given). Volume models
reconstruct whole volumes (the validation volumes, or --input) with sliding
windows of the training patch size, blended as MONAI does (progress on
stderr: windows done/total per volume, with an ETA; an --overlap that asks
for over 4 times the windows of the default 0.25 is said up front with the
count, then with an estimate of the time once the first windows are timed),
and are measured in the intensity window's units: the input is
windowed to data.volumes.window as in training, and the reference it is
measured against is that input clamped to the window (voxels outside it
count at the window's bounds, as MONAI's ScaleIntensityRange with
clip=True; metrics.json records "window", "reference_clipped" and each
volume's "clipped_voxels"). Without a window each volume is mapped from its
own min..max. PSNR and SSIM take the window's width as the data range, or
--data-range. Other models get the validation loss, and top-1/top-5
accuracy when they classify; volume-only flags (--out, --overlap, --blend,
--batch-size, --data-range) are refused for them. Metrics are printed and
written as metrics.json and metrics.csv to --out-dir (default
RUN/eval/<checkpoint>).

With --reference: metrics of one volume against another on the whole volume:
PSNR with the data range (the reference's max - min unless --data-range),
SSIM in 3-D with a Gaussian window (sigma 1.5, K1 0.01, K2 0.03, as
scikit-image's structural_similarity with gaussian_weights=True and
use_sample_covariance=False), MS-SSIM (5 scales, as torchmetrics; needs 176
voxels on every axis), MAE and MSE. The volumes are compared voxel by voxel
as stored, not resampled: a warning says where two NIfTI files' voxel
spacing or orientation (affine) differ. Both formats are read as [z,y,x]
(a .npy in NumPy's index order, the last axis fastest; a NIfTI as
nibabel's [x,y,z] reversed), so an array saved from nibabel's get_fdata()
must be transposed (np.save(path, vol.T)). With --out-dir, metrics.json and
metrics.csv are written there too. The flags of --checkpoint (--config,
--set, --out, --overlap, --blend, --batch-size, --device, --generate and its
decoding flags) are refused.

Examples:
   ortrain eval --checkpoint outputs/vqgan/version_0 --report vq.html
   ortrain eval --checkpoint outputs/vqgan/version_0 --input ct.nii.gz --out recon.nii.gz
   ortrain eval --checkpoint outputs/vqgan/version_0 --data-range 4095
   ortrain eval --input recon.nii.gz --reference ct.nii.gz --data-range 4095 --json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "a checkpoint directory, a run's version directory (its newest checkpoint), or last or best (the best by trainer.monitor; with --config)"},
			&cli.StringFlag{Name: "config", Usage: "run configuration to use instead of the checkpoint's"},
			&cli.StringSliceFlag{Name: "set", Usage: "override a key of the configuration (repeatable)"},
			&cli.StringSliceFlag{Name: "input", Usage: "volume (NIfTI .nii/.nii.gz, or NumPy .npy): to reconstruct (repeatable), or the reconstruction to compare"},
			&cli.StringFlag{Name: "out", Usage: "write the reconstruction of the one --input here: NIfTI with its geometry, or NumPy's format for a .npy path"},
			&cli.StringFlag{Name: "out-dir", Usage: "where metrics.json and metrics.csv go (default with --checkpoint: RUN/eval/<checkpoint>; with --reference: not written unless given)"},
			&cli.Float64Flag{Name: "overlap", Value: eval.DefaultOverlap, Usage: "fraction in [0, 1) by which sliding windows overlap (the window count grows as 1/(1-overlap)^3)"},
			&cli.StringFlag{Name: "blend", Value: "gaussian", Usage: "constant or gaussian weights where windows overlap"},
			&cli.IntFlag{Name: "batch-size", Value: 1, Usage: "windows per model run"},
			&cli.StringFlag{Name: "device", Usage: "cpu or cuda:N (default: the config's trainer.device)"},
			&cli.StringFlag{Name: "reference", Usage: "the reference volume to compare --input with (NIfTI or .npy)"},
			&cli.Float64Flag{Name: "data-range", Usage: "intensity range PSNR and SSIM assume, > 0, as scikit-image's data_range", DefaultText: "with --checkpoint the intensity window's width, with --reference the reference's max - min"},
			&cli.BoolFlag{Name: "json", Usage: "print the metrics as JSON"},
			&cli.StringFlag{Name: "report", Usage: "also write an HTML report with slices and error maps to this file"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace an existing --report or --out file and metrics.json/metrics.csv"},
			&cli.IntFlag{Name: "generate", Usage: "bd3lm: sample answers to the first N validation questions and report GSM8K exact-match accuracy (val/exact_match); answers go to generations.jsonl"},
			&cli.IntFlag{Name: "steps", Usage: "with --generate: denoising steps per block (default: the block length)"},
			&cli.Float64Flag{Name: "temperature", Usage: "with --generate: sampling temperature (default 0: the most likely token)"},
			&cli.Float64Flag{Name: "top-p", Value: 1, Usage: "with --generate: nucleus sampling probability"},
			&cli.Uint64Flag{Name: "seed", Usage: "with --generate: seed of the draws"},
		},
		Action: evalAction,
	}
}

func evalAction(c *cli.Context) error {
	if c.IsSet("checkpoint") && c.IsSet("reference") {
		return usageError{errors.New("eval takes --checkpoint or --reference, not both")}
	}
	if c.IsSet("reference") {
		if err := refuseCheckpointFlags(c); err != nil {
			return err
		}
	}
	// An existing report or reconstruction is refused before anything is
	// computed or written.
	for _, flag := range []string{"report", "out"} {
		if path := c.String(flag); path != "" && !c.Bool("overwrite") {
			if _, err := os.Lstat(path); err == nil {
				return &safefile.ExistsError{Path: path}
			}
		}
	}
	if err := checkEvalFlags(c); err != nil {
		return err
	}
	switch {
	case c.IsSet("checkpoint"):
		return evalCheckpoint(c)
	case c.IsSet("reference"):
		return evalCompare(c)
	}
	return usageError{errors.New("eval needs --checkpoint, or --input and --reference (see ortrain eval --help)")}
}

// outFolderExists refuses a file flag whose folder is not there, before
// the work that would write it.
func outFolderExists(flag, path string) error {
	if path == "" {
		return nil
	}
	abs, _ := filepath.Abs(path)
	if st, err := os.Stat(filepath.Dir(abs)); err != nil || !st.IsDir() {
		return usageError{fmt.Errorf("%s %s: the folder %s does not exist", flag, path, filepath.Dir(abs))}
	}
	return nil
}

// checkEvalFlags refuses, before a volume is read, what would fail only
// after a whole reconstruction: an overlap out of range, an --out of an
// unknown format or in a folder that does not exist, or one that would
// replace an --input.
func checkEvalFlags(c *cli.Context) error {
	if v := c.Float64("overlap"); !(v >= 0 && v < 1) {
		return usageError{fmt.Errorf("--overlap %g: want the fraction of a window its neighbour shares, in [0, 1)", v)}
	}
	if v := c.Float64("data-range"); c.IsSet("data-range") && !(v > 0 && !math.IsInf(v, 0)) {
		return usageError{fmt.Errorf("--data-range %g: want the intensity range PSNR and SSIM assume, a finite value > 0 (leave the flag out for the default)", v)}
	}
	if v := c.Int("batch-size"); v < 1 {
		return usageError{fmt.Errorf("--batch-size %d: want the number of windows per model run, at least 1", v)}
	}
	out := c.String("out")
	if out == "" {
		return nil
	}
	if !volumes.IsVolume(out) {
		return usageError{fmt.Errorf("--out %s: name a .nii.gz, .nii or .npy file (the format follows the extension)", out)}
	}
	if err := outFolderExists("--out", out); err != nil {
		return err
	}
	abs, _ := filepath.Abs(out)
	outInfo, outErr := os.Stat(abs)
	for _, in := range c.StringSlice("input") {
		inAbs, _ := filepath.Abs(in)
		inInfo, err := os.Stat(inAbs)
		if inAbs == abs || (err == nil && outErr == nil && os.SameFile(inInfo, outInfo)) {
			return usageError{fmt.Errorf("--out %s is the --input volume: the reconstruction would replace it; write it elsewhere", out)}
		}
	}
	return nil
}

// checkpointFlags are the flags only eval --checkpoint uses, and why.
var checkpointFlags = []struct{ name, use string }{
	{"config", "the run configuration of a checkpoint"},
	{"set", "an override of a checkpoint's configuration"},
	{"out", "where a checkpoint's reconstruction of the --input is written"},
	{"overlap", "the overlap of a checkpoint's sliding windows"},
	{"blend", "how a checkpoint's sliding windows are blended"},
	{"batch-size", "the windows per run of a checkpoint's model"},
	{"device", "where a checkpoint's model runs"},
	{"generate", "the number of answers to sample from a checkpoint"},
	{"steps", "--generate's denoising steps"},
	{"temperature", "--generate's sampling temperature"},
	{"top-p", "--generate's nucleus sampling probability"},
	{"seed", "--generate's seed"},
}

// refuseCheckpointFlags refuses, with --reference, every flag that only
// the checkpoint mode uses: no model runs, so it would be ignored.
func refuseCheckpointFlags(c *cli.Context) error {
	var given []string
	why := ""
	for _, f := range checkpointFlags {
		if c.IsSet(f.name) {
			given = append(given, "--"+f.name)
			if why == "" {
				why = f.use
			}
		}
	}
	if len(given) == 0 {
		return nil
	}
	const compare = "--reference compares the --input volume with the reference as they are and runs no model"
	if len(given) == 1 {
		return usageError{fmt.Errorf("%s is %s: it applies to --checkpoint; %s", given[0], why, compare)}
	}
	return usageError{fmt.Errorf("%s apply to --checkpoint (%s is %s); %s", strings.Join(given, ", "), given[0], why, compare)}
}

// volumeFlags are the volume-only flags given with --checkpoint, refused
// for a model that does not reconstruct volumes.
func volumeFlags(c *cli.Context) []string {
	var given []string
	for _, f := range []string{"out", "overlap", "blend", "batch-size", "data-range"} {
		if c.IsSet(f) {
			given = append(given, "--"+f)
		}
	}
	return given
}

// warner prints warnings on the command's stderr.
func warner(c *cli.Context) func(string) {
	return func(msg string) { fmt.Fprintf(c.App.ErrWriter, "ortrain: warning: %s\n", msg) }
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func evalCheckpoint(c *cli.Context) error {
	var cfg *config.Config
	if path := c.String("config"); path != "" {
		var err error
		if cfg, err = loadConfig(path, c.StringSlice("set")); err != nil {
			return err
		}
	}
	mode, err := sliding.ParseMode(c.String("blend"))
	if err != nil {
		return usageError{err}
	}
	if err := loadORTOn(c, "", checkpointDevice(c, cfg)); err != nil {
		return err
	}
	opts, err := checkpointSession(c, cfg)
	if err != nil {
		return err
	}
	o := eval.CheckpointOptions{
		Checkpoint: c.String("checkpoint"), Config: cfg, Sets: setsWithoutConfig(c), Overwrite: c.Bool("overwrite"), Inputs: c.StringSlice("input"), Out: c.String("out"),
		Overlap: c.Float64("overlap"), Mode: mode, BatchSize: c.Int("batch-size"), Session: opts,
		DataRange: c.Float64("data-range"), VolumeFlags: volumeFlags(c), Warn: warner(c),
	}
	progress := eval.NewProgressPrinter(c.App.ErrWriter, isTerminal(c.App.ErrWriter))
	o.VolumeProgress = progress.Update
	if o.Generate, err = generateOptions(c, &o.Decoding); err != nil {
		return err
	}
	// Where the results go is checked before the work that makes them
	// (generating answers can take hours).
	dir := c.String("out-dir")
	if dir == "" {
		outputDir, name := "outputs", ""
		if cfg != nil {
			outputDir, name = cfg.OutputDir, cfg.Name
		}
		if ck, _, err := rundir.FindCheckpoint("--checkpoint", o.Checkpoint, outputDir, name); err == nil {
			dir = defaultEvalDir(ck)
		}
	}
	if dir != "" {
		if err := evalOutputsFree(dir, o.Generate > 0, o.Overwrite); err != nil {
			return err
		}
	}
	if o.Generate > 0 {
		o.Progress = func(done, correct, total int) {
			if done%10 == 0 || done == total {
				fmt.Fprintf(c.App.ErrWriter, "generated %d/%d answers, %d correct\n", done, total, correct)
			}
		}
	}
	res, err := eval.EvaluateCheckpoint(c.Context, o)
	progress.Done()
	if err != nil {
		return err
	}
	if n := len(res.Skipped); n > 0 {
		fmt.Fprintf(c.App.ErrWriter, "ortrain: data.skip_bad_files dropped %d validation sample%s that could not be read; the metrics are over the rest (val/skipped_samples, skipped_files in metrics.json):\n", n, plural(n))
		for i, e := range res.Skipped {
			if i == 5 {
				fmt.Fprintf(c.App.ErrWriter, "  ... and %d more\n", n-5)
				break
			}
			fmt.Fprintf(c.App.ErrWriter, "  %s\n", e)
		}
	}
	if o.Generate > len(res.Generations) && len(res.Generations) > 0 {
		fmt.Fprintf(c.App.ErrWriter, "ortrain: --generate %d: the validation file has %d questions; answered them all\n", o.Generate, len(res.Generations))
	}
	if n, first := notGenerated(res.Generations); n > 0 {
		fmt.Fprintf(c.App.ErrWriter, "ortrain: %d of %d validation questions could not be put to the model and count as wrong (not_generated in generations.jsonl), e.g. %s\n",
			n, len(res.Generations), first)
	}
	if c.String("out-dir") == "" {
		dir = defaultEvalDir(res.Checkpoint)
	}
	if err := writeEvalMetrics(dir, res, c.Bool("overwrite")); err != nil {
		return err
	}
	if o.Generate > 0 {
		path := filepath.Join(dir, "generations.jsonl")
		err := safefile.Write(path, c.Bool("overwrite"), func(w io.Writer) error {
			enc := json.NewEncoder(w)
			for _, g := range res.Generations {
				if err := enc.Encode(g); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "checkpoint %s (step %d)\n", res.Checkpoint, res.Step)
		for _, row := range res.Table()[1:] {
			fmt.Fprintf(w, "%-28s %s\n", row[0], row[1])
		}
	}
	if path := c.String("report"); path != "" {
		r := report.Report{Title: "Evaluation of " + res.Checkpoint, Generated: time.Now(), Volumes: res.Reports,
			MetricOrder: []string{"PSNR", "SSIM", "MS-SSIM", "MAE", "MSE"},
			Tables:      []report.Table{{Title: "All metrics (as in metrics.csv)", Columns: []string{"metric", "value"}, Rows: res.Table()[1:]}},
			Env:         []report.KV{{Key: "ortrain", Value: version}, {Key: "ONNX Runtime", Value: ort.Version()}, {Key: "device", Value: opts.Device.String()}}}
		if len(res.Volumes) > 0 {
			r.Tables = append(r.Tables, report.Table{Title: "How the volumes were measured", Columns: []string{"setting", "value"}, Rows: measuredAs(res)})
		}
		if err := report.Write(path, r, c.Bool("overwrite")); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", path)
	}
	return nil
}

// measuredAs describes, for the report, the intensity window and data
// range the volumes of res were measured with.
func measuredAs(res *eval.CheckpointResult) [][]string {
	var rows [][]string
	if res.Window != nil {
		rows = append(rows, []string{"intensity window (data.volumes.window)", fmt.Sprintf("[%g, %g]", res.Window[0], res.Window[1])},
			[]string{"reference", "the input clamped to the window (each volume's clipped_voxels in metrics.json)"})
	} else {
		rows = append(rows, []string{"intensity window", "none: each volume mapped from its own min..max"})
	}
	if res.DataRange > 0 {
		rows = append(rows, []string{"data range (PSNR, SSIM)", fmt.Sprintf("%g (--data-range)", res.DataRange)})
	} else if res.Window != nil {
		rows = append(rows, []string{"data range (PSNR, SSIM)", fmt.Sprintf("%g (the window's width)", res.Window[1]-res.Window[0])})
	} else {
		rows = append(rows, []string{"data range (PSNR, SSIM)", "each reference's max - min"})
	}
	return rows
}

// generateOptions reads eval's --generate and its decoding flags into d;
// decoding flags without --generate, and bad values, are refused.
func generateOptions(c *cli.Context, d *eval.Decoding) (int, error) {
	n := c.Int("generate")
	if !c.IsSet("generate") {
		for _, f := range []string{"steps", "temperature", "top-p", "seed"} {
			if c.IsSet(f) {
				return 0, usageError{fmt.Errorf("--%s applies to --generate", f)}
			}
		}
		return 0, nil
	}
	if n < 1 {
		return 0, usageError{fmt.Errorf("--generate %d: want the number of validation questions to answer (at least 1)", n)}
	}
	var err error
	*d, err = decodingFlags(c)
	return n, err
}

// decodingFlags reads --steps, --temperature, --top-p and --seed; an
// explicit --steps 0 is refused (unset means the block length).
func decodingFlags(c *cli.Context) (eval.Decoding, error) {
	d := eval.Decoding{Steps: c.Int("steps"), Temperature: c.Float64("temperature"), TopP: c.Float64("top-p"), Seed: c.Uint64("seed")}
	if c.IsSet("steps") && d.Steps < 1 {
		return d, usageError{fmt.Errorf("--steps %d: each block needs at least one denoising step", d.Steps)}
	}
	if err := d.Check(); err != nil {
		return d, usageError{err}
	}
	return d, nil
}

// checkpointSession is the session a command reading a checkpoint runs
// with: on --device, or as cfg's trainer says (cfg may be nil: the CPU).
func checkpointSession(c *cli.Context, cfg *config.Config) (ort.Options, error) {
	opts := ort.Options{}
	var err error
	if d := c.String("device"); d != "" {
		if opts.Device, err = ort.ParseDevice(d); err == nil {
			err = usableDevice("--device", opts)
		}
		return opts, err
	}
	if cfg != nil {
		providers, _ := ort.AvailableProviders()
		if opts, err = cfg.SessionOptions(slices.Contains(providers, "CUDAExecutionProvider")); err != nil {
			return opts, err
		}
		// The device the run trained on, when this machine has it; a run
		// from a GPU box evaluates here on the CPU.
		if uerr := usableDevice("trainer.device", opts); uerr != nil {
			fmt.Fprintf(c.App.ErrWriter, "ortrain: %v; running on the CPU (--device chooses)\n", uerr)
			opts.Device = ort.CPU
		}
	}
	return opts, nil
}

// setsWithoutConfig returns the --set overrides when no --config is given:
// they then apply to the configuration saved in the checkpoint (with
// --config they were applied to it already).
func setsWithoutConfig(c *cli.Context) []string {
	if c.String("config") != "" {
		return nil
	}
	return c.StringSlice("set")
}

// notGenerated counts the questions ExactMatch could not ask, with the
// first one's reason.
func notGenerated(gens []eval.Generation) (n int, first string) {
	for _, g := range gens {
		if g.NotGenerated != "" {
			if n == 0 {
				first = g.NotGenerated
			}
			n++
		}
	}
	return n, first
}

// defaultEvalDir is where eval --checkpoint writes without --out-dir:
// RUN/eval/<checkpoint>.
func defaultEvalDir(ck string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(ck)), "eval", filepath.Base(ck))
}

// evalOutputsFree refuses an --out-dir whose metrics (and generations)
// files exist, unless overwrite.
func evalOutputsFree(dir string, generations, overwrite bool) error {
	files := []string{filepath.Join(dir, "metrics.json"), filepath.Join(dir, "metrics.csv")}
	if generations {
		files = append(files, filepath.Join(dir, "generations.jsonl"))
	}
	for _, p := range files {
		if _, err := os.Stat(p); err == nil && !overwrite {
			return usageError{fmt.Errorf("%s exists; pass another --out-dir, or --overwrite", p)}
		}
	}
	return nil
}

// writeEvalMetrics writes metrics.json and metrics.csv into dir, which must
// not hold them already unless overwrite; each appears whole or not at all.
func writeEvalMetrics(dir string, res *eval.CheckpointResult, overwrite bool) error {
	js, csvPath := filepath.Join(dir, "metrics.json"), filepath.Join(dir, "metrics.csv")
	if err := evalOutputsFree(dir, len(res.Generations) > 0, overwrite); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := safefile.WriteBytes(js, overwrite, append(b, '\n')); err != nil {
		return err
	}
	return safefile.Write(csvPath, overwrite, func(w io.Writer) error {
		cw := csv.NewWriter(w)
		cw.WriteAll(res.CSV())
		return cw.Error()
	})
}

// writeCompareMetrics writes eval --reference's metrics as metrics.json
// (what --json prints) and metrics.csv (metric,value rows) into dir.
func writeCompareMetrics(dir string, m eval.VolumeMetrics, overwrite bool) error {
	if err := evalOutputsFree(dir, false, overwrite); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := safefile.WriteBytes(filepath.Join(dir, "metrics.json"), overwrite, append(b, '\n')); err != nil {
		return err
	}
	return safefile.Write(filepath.Join(dir, "metrics.csv"), overwrite, func(w io.Writer) error {
		cw := csv.NewWriter(w)
		cw.WriteAll(m.CSV())
		return cw.Error()
	})
}

func evalCompare(c *cli.Context) error {
	inputs := c.StringSlice("input")
	if len(inputs) != 1 {
		return usageError{fmt.Errorf("--reference compares one --input, got %d", len(inputs))}
	}
	dir := c.String("out-dir")
	if dir != "" {
		if err := evalOutputsFree(dir, false, c.Bool("overwrite")); err != nil {
			return err
		}
	}
	in, ref := inputs[0], c.String("reference")
	m, entry, err := eval.CompareFiles(in, ref, c.Float64("data-range"))
	if err != nil {
		return err
	}
	for _, w := range m.Warnings {
		warner(c)(w)
	}
	if dir != "" {
		if err := writeCompareMetrics(dir, m, c.Bool("overwrite")); err != nil {
			return err
		}
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(m); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "%s against %s (%d×%d×%d, data range %g)\n", in, ref, m.Shape[0], m.Shape[1], m.Shape[2], m.DataRange)
		fmt.Fprintf(w, "PSNR     %.4f dB\n", m.PSNR)
		if m.SSIM != nil {
			fmt.Fprintf(w, "SSIM     %.6f\n", *m.SSIM)
		} else {
			fmt.Fprintf(w, "SSIM     %s\n", m.SSIMNote)
		}
		if m.MSSSIM != nil {
			fmt.Fprintf(w, "MS-SSIM  %.6f\n", *m.MSSSIM)
		} else {
			fmt.Fprintf(w, "MS-SSIM  %s\n", m.MSSSIMNote)
		}
		fmt.Fprintf(w, "MAE      %.6g\nMSE      %.6g\n", m.MAE, m.MSE)
	}
	if path := c.String("report"); path != "" {
		entry.InputLabel, entry.ReconLabel = "reference", "input"
		entry.Name = in
		r := report.Report{
			Title:       "Comparison of " + in + " with the reference " + ref,
			Generated:   time.Now(),
			Volumes:     []report.VolumeResult{entry},
			MetricOrder: []string{"PSNR", "SSIM", "MS-SSIM", "MAE", "MSE"},
			Env: []report.KV{{Key: "ortrain", Value: version}, {Key: "input (--input)", Value: in}, {Key: "reference (--reference)", Value: ref},
				{Key: "data range (PSNR, SSIM)", Value: dataRangeNote(c, m.DataRange)}},
		}
		if err := report.Write(path, r, c.Bool("overwrite")); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", path)
	}
	return nil
}

// dataRangeNote says where eval --reference's data range came from.
func dataRangeNote(c *cli.Context, r float64) string {
	if c.IsSet("data-range") {
		return fmt.Sprintf("%g (--data-range)", r)
	}
	return fmt.Sprintf("%g (the reference's max - min)", r)
}
