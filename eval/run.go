package eval

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ortrain/ortrain/eval/report"
	"github.com/ortrain/ortrain/metrics"
	"github.com/ortrain/ortrain/training/logging"
	"github.com/ortrain/ortrain/training/safefile"
)

// RunReport gathers what a run directory (outputs/<name>/version_N) holds
// into a report: the loss and metric curves of metrics.csv, the last value
// of every metric, and the resolved config. env is shown as given.
func RunReport(dir string, env []report.KV) (report.Report, error) {
	r := report.Report{Title: "ortrain run " + runName(dir), Generated: time.Now(), Env: env}
	series, err := logging.ReadCSV(filepath.Join(dir, "metrics.csv"))
	if errors.Is(err, os.ErrNotExist) {
		return r, &InputError{File: dir, Err: errors.New("no metrics.csv: not a run directory, or the run logged nothing yet")}
	}
	if err != nil {
		return r, &InputError{Err: err}
	}
	if cfg, err := safefile.ReadFile(filepath.Join(dir, "config.toml")); err == nil {
		r.Config = string(cfg)
	}
	r.Charts = charts(series)
	last := report.Table{Title: "Last values", Columns: []string{"metric", "step", "value"}}
	for _, s := range series {
		n := len(s.Step) - 1
		last.Rows = append(last.Rows, []string{s.Name, strconv.FormatFloat(s.Step[n], 'f', 0, 64), strconv.FormatFloat(s.Value[n], 'g', 6, 64)})
	}
	r.Tables = append(r.Tables, last)
	r.Tables = append(r.Tables, evalTables(dir)...)
	return r, nil
}

// evalTables are the results `ortrain eval --checkpoint` wrote into the run
// directory (RUN/eval/<checkpoint>/metrics.json and metrics.csv), one
// table per checkpoint evaluated, in the order of their names (steps).
func evalTables(dir string) []report.Table {
	found, _ := filepath.Glob(filepath.Join(dir, "eval", "*", "metrics.json"))
	slices.Sort(found)
	var tables []report.Table
	for _, js := range found {
		rel, _ := filepath.Rel(dir, js)
		t := report.Table{Columns: []string{"metric", "value"}}
		var res struct {
			Checkpoint string
			Step       int64
			Volumes    []json.RawMessage
			Window     *[2]float64
		}
		b, err := safefile.ReadFile(js)
		if err == nil {
			err = json.Unmarshal(b, &res)
		}
		if err != nil {
			t.Title = "Evaluation in " + rel
			t.Rows = [][]string{{"unreadable", err.Error()}}
			tables = append(tables, t)
			continue
		}
		t.Title = fmt.Sprintf("Evaluation of %s, step %d (%s)", filepath.Base(res.Checkpoint), res.Step, rel)
		if len(res.Volumes) > 0 {
			note := "whole volumes reconstructed by sliding windows, measured in the intensity units"
			if res.Window != nil {
				note += fmt.Sprintf(" of the window [%g, %g]", res.Window[0], res.Window[1])
			}
			note += " (PSNR in dB); the curves' val/psnr and val/ssim are over validation patches on the model's [-1, 1] scale (data range 2)"
			t.Rows = append(t.Rows, []string{"measured", note})
		}
		rows, err := readEvalCSV(filepath.Join(filepath.Dir(js), "metrics.csv"))
		if err != nil {
			rows = [][]string{{"metrics.csv", err.Error()}}
		}
		t.Rows = append(t.Rows, rows...)
		tables = append(tables, t)
	}
	return tables
}

// readEvalCSV reads an eval metrics.csv's metric,value rows, without the
// header.
func readEvalCSV(path string) ([][]string, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = 2
	rows, err := r.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) > 0 && rows[0][0] == "metric" {
		rows = rows[1:]
	}
	return rows, nil
}

// charts draws metrics.csv as charts whose curves share a unit, so each
// reads on its own linear axis: the training and validation losses
// together (log axis when all positive), the model's other loss terms
// together, the adversarial losses, the discriminator's logits, PSNR, SSIM,
// the codebook's usage (training batches and validation together) and its
// perplexity likewise, top-1 with top-5, each other validation metric on
// its own, and the remaining metrics grouped by the
// prefix before "/" (gpu/util, gpu/memory ...). The epoch counter gets
// none: the last-values table has it.
func charts(series []logging.Series) []report.Chart {
	var order []string
	groups := map[string][]report.Series{}
	for _, s := range series {
		title := chartOf(s.Name)
		if title == "" {
			continue
		}
		if _, seen := groups[title]; !seen {
			order = append(order, title)
		}
		groups[title] = append(groups[title], report.Series{Name: s.Name, Step: s.Step, Value: s.Value})
	}
	// The loss first, then the order of the table's sections. Among the
	// validation metrics, a reconstruction's PSNR and SSIM come first with
	// the codebook's usage and perplexity right after them: a VQ-GAN whose
	// quality stalls is first checked for a collapsed codebook.
	first := []string{metrics.ValPSNR, metrics.ValSSIM, chartCodebookUsage, chartCodebookPerplexity}
	rank := func(t string) int {
		if i := slices.Index([]string{chartLoss, chartTerms, chartAdversarial, chartLogits}, t); i >= 0 {
			return i
		}
		if i := slices.Index(first, t); i >= 0 {
			return 4 + i
		}
		if strings.HasPrefix(t, "val/") || t == chartAccuracy {
			return 8
		}
		if len(groups[t]) == 1 && groups[t][0].Name == t {
			return 9 // a metric of its own: lr, grad_norm
		}
		return 10 // a prefix's group: gpu, throughput, time
	}
	sort.SliceStable(order, func(a, b int) bool {
		if ra, rb := rank(order[a]), rank(order[b]); ra != rb {
			return ra < rb
		}
		return rank(order[a]) == 10 && order[a] < order[b]
	})
	var out []report.Chart
	for _, title := range order {
		ss := groups[title]
		c := report.Chart{Title: title, XLabel: "step", Series: ss}
		switch title {
		case chartLoss, chartTerms:
			c.YLabel, c.LogY = "loss", allPositive(ss)
		case chartAdversarial:
			c.YLabel = "loss"
		case chartLogits:
			c.YLabel = "mean logit"
		case chartCodebookUsage:
			c.YLabel = "share of the codes picked"
		case chartCodebookPerplexity:
			c.YLabel = "perplexity (codes)"
		}
		if len(ss) == 1 && c.YLabel == "" {
			c.YLabel = ss[0].Name
		}
		if c.YLabel == "" {
			c.YLabel = title
		}
		if allSuffixed(ss, "_bytes") {
			// Byte counts read in MB or GiB, not as 82500000.
			var unit string
			c.Series, unit = inByteUnit(ss)
			c.YLabel += " (" + unit + ")"
		} else if allSuffixed(ss, "psnr") {
			c.YLabel += " (dB)"
		}
		out = append(out, c)
	}
	return out
}

// allSuffixed says whether every series' name ends with suffix.
func allSuffixed(ss []report.Series, suffix string) bool {
	for _, s := range ss {
		if !strings.HasSuffix(s.Name, suffix) {
			return false
		}
	}
	return len(ss) > 0
}

// inByteUnit scales byte counts to GiB when the largest is at least one,
// else to MB, returning copies and the unit.
func inByteUnit(ss []report.Series) ([]report.Series, string) {
	top := 0.0
	for _, s := range ss {
		for _, v := range s.Value {
			if !math.IsInf(v, 0) && !math.IsNaN(v) {
				top = max(top, math.Abs(v))
			}
		}
	}
	unit, div := "MB", 1e6
	if top >= 1<<30 {
		unit, div = "GiB", 1<<30
	}
	out := make([]report.Series, len(ss))
	for i, s := range ss {
		out[i] = report.Series{Name: s.Name, Step: s.Step, Value: make([]float64, len(s.Value))}
		for j, v := range s.Value {
			out[i].Value[j] = v / div
		}
	}
	return out, unit
}

// Chart titles shared by several metrics.
const (
	chartLoss        = "Loss"
	chartTerms       = "Loss terms"
	chartAdversarial = "Adversarial losses"
	chartLogits      = "Discriminator logits"
	chartAccuracy    = "Accuracy"
	// The codebook's usage and perplexity, of the training batches
	// (train/…, logged every log_every_n_steps) and of validation (val/…).
	chartCodebookUsage      = "Codebook usage"
	chartCodebookPerplexity = "Codebook perplexity"
)

// chartOf names the chart a metric goes on ("" for none).
func chartOf(name string) string {
	switch {
	case name == "epoch":
		return ""
	case name == "loss" || name == "train/loss" || name == "val/loss":
		return chartLoss
	case name == "train/g_loss" || name == "train/d_loss":
		return chartAdversarial
	case name == "train/d_real" || name == "train/d_fake":
		return chartLogits
	case strings.HasPrefix(name, "train/") && strings.HasSuffix(name, "loss"):
		return chartTerms
	case name == "val/top1" || name == "val/top5":
		return chartAccuracy
	case name == "train/codebook_usage" || name == metrics.ValCodebookUsage:
		return chartCodebookUsage
	case name == "train/codebook_perplexity" || name == metrics.ValCodebookPerplexity:
		return chartCodebookPerplexity
	case strings.HasPrefix(name, "val/"), strings.HasPrefix(name, "train/"), !strings.Contains(name, "/"):
		return name
	}
	return name[:strings.Index(name, "/")]
}

func allPositive(ss []report.Series) bool {
	for _, s := range ss {
		for _, v := range s.Value {
			if !(v > 0) {
				return false
			}
		}
	}
	return true
}

// runName is "<name>/version_N" for a run directory, its base name otherwise.
func runName(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	if base := filepath.Base(abs); strings.HasPrefix(base, "version_") {
		return fmt.Sprintf("%s/%s", filepath.Base(filepath.Dir(abs)), base)
	}
	return filepath.Base(abs)
}
