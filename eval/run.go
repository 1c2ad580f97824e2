package eval

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ortrain/ortrain/eval/report"
	"github.com/ortrain/ortrain/training/logging"
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
	if cfg, err := os.ReadFile(filepath.Join(dir, "config.toml")); err == nil {
		r.Config = string(cfg)
	}
	r.Charts = charts(series)
	last := report.Table{Title: "Last values", Columns: []string{"metric", "step", "value"}}
	for _, s := range series {
		n := len(s.Step) - 1
		last.Rows = append(last.Rows, []string{s.Name, strconv.FormatFloat(s.Step[n], 'f', 0, 64), strconv.FormatFloat(s.Value[n], 'g', 6, 64)})
	}
	r.Tables = append(r.Tables, last)
	return r, nil
}

// charts puts the training and validation losses on one chart, the
// learning rate and gradient norm on charts of their own, and groups the
// remaining metrics by the prefix before "/" (gpu/util, gpu/memory ...);
// the epoch counter gets none.
func charts(series []logging.Series) []report.Chart {
	var loss, rest []report.Series
	groups := map[string][]report.Series{}
	for _, s := range series {
		rs := report.Series{Name: s.Name, Step: s.Step, Value: s.Value}
		switch {
		case s.Name == "epoch": // a staircase; the last-values table has it
		case s.Name == "loss" || strings.HasSuffix(s.Name, "/loss"):
			loss = append(loss, rs)
		case strings.Contains(s.Name, "/"):
			p := s.Name[:strings.Index(s.Name, "/")]
			groups[p] = append(groups[p], rs)
		default:
			rest = append(rest, rs)
		}
	}
	var out []report.Chart
	if len(loss) > 0 {
		out = append(out, report.Chart{Title: "Loss", XLabel: "step", YLabel: "loss", LogY: allPositive(loss), Series: loss})
	}
	for _, s := range rest {
		out = append(out, report.Chart{Title: s.Name, XLabel: "step", YLabel: s.Name, Series: []report.Series{s}})
	}
	prefixes := make([]string, 0, len(groups))
	for p := range groups {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	for _, p := range prefixes {
		out = append(out, report.Chart{Title: p, XLabel: "step", Series: groups[p]})
	}
	return out
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
