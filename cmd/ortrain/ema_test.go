package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/data/synthetic"
	"github.com/ortrain/ortrain/training/safetensors"
)

// TestWeightEMA: with optimizer.ema_decay the run keeps a moving average of
// its weights: the checkpoint holds it beside the weights (and it differs
// from them), validation measures it, and eval of the checkpoint, which
// takes the average too, reports the same val/loss as the run's last
// validation.
func TestWeightEMA(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	train := filepath.Join(root, "train.jsonl")
	if err := synthetic.WriteGSM8K(train, 8, 1); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "lm.toml")
	body := `name = "ema"
output_dir = "` + filepath.Join(root, "outputs") + `"
[model]
recipe = "bd3lm"
loss = "loss"
[model.params]
seq_len = 128
block_size = 16
hidden = 32
layers = 1
heads = 2
[data]
kind = "tokens"
train = "` + train + `"
val = "` + train + `"
batch_size = 4
num_workers = 1
[data.tokens]
seq_len = 128
block_size = 16
[trainer]
device = "cpu"
max_steps = 4
val_check_interval = 4
[optimizer]
name = "adamw"
lr = 1e-2
ema_decay = 0.5
`
	os.WriteFile(cfg, []byte(body), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "weight EMA 0.5") {
		t.Errorf("the run does not say it keeps a weight EMA:\n%s", errOut.String())
	}
	version := filepath.Join(root, "outputs", "ema", "version_0")
	ck, err := checkpoint.Latest(filepath.Join(version, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(ck, checkpoint.TensorsFile))
	if err != nil {
		t.Fatal(err)
	}
	w, errW := f.Read("tok_emb.weight")
	avg, errA := f.Read("ema.tok_emb.weight")
	f.Close()
	if errW != nil || errA != nil || bytes.Equal(w, avg) {
		t.Fatalf("checkpoint: weight %v, average %v, equal %v; want both, different", errW, errA, bytes.Equal(w, avg))
	}

	rows, err := csv.NewReader(mustOpen(t, filepath.Join(version, "metrics.csv"))).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("metrics.csv: %v", err)
	}
	// Rows are step, name, value, time.
	name, value := slices.Index(rows[0], "name"), slices.Index(rows[0], "value")
	var logged float64
	for _, r := range rows[1:] {
		if name >= 0 && r[name] == "val/loss" {
			logged, _ = strconv.ParseFloat(r[value], 64)
		}
	}
	out.Reset()
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("eval: exit %d: %s", code, errOut.String())
	}
	var res struct{ Mean map[string]float64 }
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if logged == 0 {
		t.Fatalf("no val/loss in metrics.csv: %v", rows)
	}
	if got := res.Mean["val/loss"]; got-logged > 1e-4*logged || logged-got > 1e-4*logged {
		t.Errorf("eval of the checkpoint: val/loss %g; the run's validation logged %g (both on the average)", got, logged)
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
