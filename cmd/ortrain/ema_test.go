package main

import (
	"bytes"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/synthetic"
	"github.com/ortrain/ortrain/training/safetensors"
	"github.com/ortrain/ortrain/training/setup"
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
	checkTwinPerplexity(t, root, cfg, version, ck, res.Mean)
}

// checkTwinPerplexity: the validation batches eval scored (the same noisy
// ids and t), all in one, through the PyTorch twin holding the
// checkpoint's averaged weights (models/pytorch/load_checkpoint.py): its
// per-token NELBO is eval's val/nll and exp of it val/ppl.
func checkTwinPerplexity(t *testing.T, root, cfgPath, version, ck string, mean map[string]float64) {
	t.Helper()
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		t.Logf("no PyTorch under %s: perplexity not compared with the twin", python)
		return
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	_, m, err := setup.Artifacts(cfg, version, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, val, err := setup.Datasets(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	lc := setup.LoaderConfig(cfg, false)
	lc.Epochs = 1
	loader, err := data.New(val, lc)
	if err != nil {
		t.Fatal(err)
	}
	defer loader.Close()
	all := map[string]*safetensors.Tensor{}
	var order []string
	for {
		b, err := loader.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"noisy_ids", "input_ids", "t", "loss_mask"} {
			x := b.Tensor(name)
			var raw []byte
			var dt ort.DType
			switch x.DType {
			case data.Int64:
				raw, dt = unsafe.Slice((*byte)(unsafe.Pointer(&x.I64[0])), 8*len(x.I64)), ort.Int64
			case data.Float32:
				raw, dt = unsafe.Slice((*byte)(unsafe.Pointer(&x.F32[0])), 4*len(x.F32)), ort.Float32
			default:
				raw, dt = x.U8, ort.Uint8
			}
			if all[name] == nil {
				all[name] = &safetensors.Tensor{Name: name, DType: dt, Shape: []int64{0, int64(x.Shape[1])}}
				order = append(order, name)
			}
			all[name].Data = append(all[name].Data, raw...)
			all[name].Shape[0] += int64(x.Shape[0])
		}
	}
	var ts []safetensors.Tensor
	for _, name := range order {
		ts = append(ts, *all[name])
	}
	in, out := filepath.Join(root, "lm-in.safetensors"), filepath.Join(root, "lm-out.safetensors")
	if err := safetensors.Write(in, ts, nil); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, filepath.Join("..", "..", "models", "pytorch", "load_checkpoint.py"), ck, "--ema", "--run", in, out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("load_checkpoint.py: %v\n%s", err, msg)
	}
	got, _, err := safetensors.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range got {
		if x.Name != "loss" {
			continue
		}
		nelbo := float64(math.Float32frombits(binary.LittleEndian.Uint32(x.Data)))
		t.Logf("per-token NELBO: twin %.6f, eval %.6f; val/ppl %.4f, exp(twin) %.4f", nelbo, mean["val/nll"], mean["val/ppl"], math.Exp(nelbo))
		if math.Abs(nelbo-mean["val/nll"]) > 1e-4*math.Abs(nelbo) || math.Abs(math.Exp(nelbo)-mean["val/ppl"]) > 1e-4*mean["val/ppl"] {
			t.Errorf("the twin's per-token NELBO %.6f (ppl %.4f) on eval's batches; eval reports val/nll %.6f, val/ppl %.4f", nelbo, math.Exp(nelbo), mean["val/nll"], mean["val/ppl"])
		}
		return
	}
	t.Error("the twin returned no loss")
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
