package eval_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/training/logging"
)

func TestRunReportFromMetricsCSV(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo", "version_3")
	os.MkdirAll(dir, 0o755)
	c, err := logging.OpenCSV(filepath.Join(dir, "metrics.csv"), -1)
	if err != nil {
		t.Fatal(err)
	}
	for step := int64(1); step <= 20; step++ {
		m := map[string]float64{"loss": 1 / float64(step), "lr": 0.1, "gpu/util": 90, "gpu/memory": 10}
		if step%5 == 0 {
			m["val/loss"] = 1.5 / float64(step)
		}
		c.Log(step, m)
	}
	c.Close()
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte("name = \"demo\"\n"), 0o644)

	r, err := eval.RunReport(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Title != "ortrain run demo/version_3" || !strings.Contains(r.Config, `name = "demo"`) {
		t.Errorf("title %q, config %q", r.Title, r.Config)
	}
	var titles []string
	for _, ch := range r.Charts {
		titles = append(titles, ch.Title)
	}
	if strings.Join(titles, ",") != "Loss,lr,gpu" || len(r.Charts[0].Series) != 2 || len(r.Charts[2].Series) != 2 {
		t.Errorf("charts %v, want Loss (loss and val/loss), lr, gpu (util and memory)", titles)
	}
	rows := r.Tables[0].Rows
	if len(rows) != 5 || strings.Join(rows[2], " ") != "loss 20 0.05" || strings.Join(rows[4], " ") != "val/loss 20 0.075" {
		t.Errorf("last values %v, want one row per metric with loss 20 0.05 and val/loss 20 0.075", rows)
	}
	if _, err := eval.RunReport(t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "no metrics.csv") {
		t.Errorf("a directory without metrics.csv gave %v", err)
	}
}
