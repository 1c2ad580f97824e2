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

// TestRunReportChartsOfAVQGAN: a VQ-GAN run's metrics land on charts whose
// curves share a unit: losses, loss terms, adversarial losses,
// discriminator logits, then PSNR and SSIM each on its own, next to the
// codebook's usage and perplexity (training and validation together), then
// the rest.
func TestRunReportChartsOfAVQGAN(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gan", "version_0")
	os.MkdirAll(dir, 0o755)
	c, err := logging.OpenCSV(filepath.Join(dir, "metrics.csv"), -1)
	if err != nil {
		t.Fatal(err)
	}
	for step := int64(1); step <= 4; step++ {
		c.Log(step, map[string]float64{"train/loss": 1, "train/rec_loss": 0.5, "train/commit_loss": 0.1, "train/g_loss": 0.2, "train/d_loss": 1,
			"train/d_real": 0.3, "train/d_fake": -0.3, "train/skipped_steps": 0, "lr": 1e-4, "grad_norm": 2, "throughput/samples_per_s": 5, "epoch": 0,
			"train/codebook_usage": 0.8, "train/codebook_perplexity": 100})
		if step%2 == 0 {
			c.Log(step, map[string]float64{"val/loss": 1, "val/psnr": 20, "val/ssim": 0.5, "val/codebook_usage": 0.9, "val/codebook_perplexity": 120})
		}
	}
	c.Close()
	r, err := eval.RunReport(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range r.Charts {
		var names []string
		for _, s := range ch.Series {
			names = append(names, s.Name)
		}
		got = append(got, ch.Title+"("+strings.Join(names, " ")+")")
	}
	want := "Loss(train/loss val/loss) Loss terms(train/commit_loss train/rec_loss) Adversarial losses(train/d_loss train/g_loss) " +
		"Discriminator logits(train/d_fake train/d_real) val/psnr(val/psnr) val/ssim(val/ssim) " +
		"Codebook usage(train/codebook_usage val/codebook_usage) Codebook perplexity(train/codebook_perplexity val/codebook_perplexity) " +
		"grad_norm(grad_norm) lr(lr) train/skipped_steps(train/skipped_steps) throughput(throughput/samples_per_s)"
	if strings.Join(got, " ") != want {
		t.Errorf("charts\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
}

// TestRunReportUnitsAndEval: byte counts are charted in MB (GiB from one
// GiB up), PSNR curves say dB, and the results `ortrain eval` wrote into
// the run directory are tables of the report, one per checkpoint, in
// step order; an unreadable one is said, not fatal.
func TestRunReportUnitsAndEval(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vq", "version_0")
	os.MkdirAll(dir, 0o755)
	c, err := logging.OpenCSV(filepath.Join(dir, "metrics.csv"), -1)
	if err != nil {
		t.Fatal(err)
	}
	for step := int64(1); step <= 3; step++ {
		c.Log(step, map[string]float64{"loss": 1, "memory/step_peak_bytes": 82.5e6, "memory/reserved_bytes": 90e6, "val/psnr": 20})
	}
	c.Close()
	for _, e := range []struct{ name, json, csv string }{
		{"step-000000200", `{"checkpoint": "x/checkpoints/step-000000200", "step": 200, "volumes": [{}], "window": [-1000, 1000], "mean": {"psnr": 21}}`,
			"metric,value\npsnr,21\npatient/psnr,21\n"},
		{"step-000000100", `{"checkpoint": "x/checkpoints/step-000000100", "step": 100, "mean": {"val/top1": 0.5}}`, "metric,value\nval/top1,0.5\n"},
		{"step-000000300", `{"checkpoint": `, ""},
	} {
		d := filepath.Join(dir, "eval", e.name)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "metrics.json"), []byte(e.json), 0o644)
		os.WriteFile(filepath.Join(d, "metrics.csv"), []byte(e.csv), 0o644)
	}
	r, err := eval.RunReport(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, ch := range r.Charts {
		labels[ch.Title] = ch.YLabel
		if ch.Title == "memory" && ch.Series[0].Value[0] > 100 {
			t.Errorf("memory charted as %v, want MB", ch.Series[0].Value)
		}
	}
	if labels["memory"] != "memory (MB)" || labels["val/psnr"] != "val/psnr (dB)" {
		t.Errorf("chart y labels %v; want memory (MB) and val/psnr (dB)", labels)
	}
	var titles []string
	for _, tb := range r.Tables[1:] {
		titles = append(titles, tb.Title)
	}
	if len(r.Tables) != 4 || !strings.HasPrefix(titles[0], "Evaluation of step-000000100, step 100") ||
		!strings.HasPrefix(titles[1], "Evaluation of step-000000200, step 200") || !strings.Contains(titles[2], "step-000000300") {
		t.Fatalf("tables after the last values: %q; want the three evaluations in step order", titles)
	}
	rows := r.Tables[2].Rows
	if len(rows) != 3 || rows[0][0] != "measured" || !strings.Contains(rows[0][1], "[-1000, 1000]") || strings.Join(rows[2], ",") != "patient/psnr,21" {
		t.Errorf("rows of the volume evaluation: %q", rows)
	}
	if rows := r.Tables[3].Rows; len(rows) != 1 || rows[0][0] != "unreadable" {
		t.Errorf("a broken metrics.json: %q, want it said", rows)
	}
}
