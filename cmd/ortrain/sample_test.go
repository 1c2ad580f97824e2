package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/data/synthetic"
	"github.com/ortrain/ortrain/training/data/tokens"
)

// trainTinyLM trains a CPU-sized bd3lm for a few steps on synthetic GSM8K
// problems, with the layout lines model and data added to [model.params]
// and [data.tokens], and returns the run's version directory.
func trainTinyLM(t *testing.T, root, model, data string) string {
	t.Helper()
	train := filepath.Join(root, "train.jsonl")
	if err := synthetic.WriteGSM8K(train, 16, 1); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "lm.toml")
	body := `name = "lm"
output_dir = "` + filepath.Join(root, "outputs") + `"
[model]
recipe = "bd3lm"
loss = "loss"
[model.params]
seq_len = 128
hidden = 32
layers = 1
heads = 2
MODEL
[data]
kind = "tokens"
train = "` + train + `"
batch_size = 4
num_workers = 1
[data.tokens]
seq_len = 128
DATA
[trainer]
device = "cpu"
max_steps = 2
[optimizer]
name = "adamw"
lr = 1e-3
`
	os.WriteFile(cfg, []byte(strings.NewReplacer("MODEL", model, "DATA", data).Replace(body)), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	return filepath.Join(root, "outputs", "lm", "version_0")
}

const samplePrompt = "Ken has 12 shells. Ken buys 3 packs with 4 shells in each pack. How many shells does Ken have now?"

// sampleJSON runs ortrain sample --json with args and decodes its output.
func sampleJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(append([]string{"ortrain", "sample", "--json"}, args...), &out, &errOut); code != 0 {
		t.Fatalf("sample %v: exit %d: %s", args, code, errOut.String())
	}
	var gens []map[string]any
	dec := json.NewDecoder(&out)
	for dec.More() {
		var g map[string]any
		if err := dec.Decode(&g); err != nil {
			t.Fatalf("sample --json printed %q: %v", out.String(), err)
		}
		gens = append(gens, g)
	}
	return gens
}

// TestSampleBD3LM: text sampled from a trained bd3lm checkpoint is the same
// for a seed, differs between seeds at temperature 1, holds only token ids
// of GPT-2's vocabulary (never the mask), and bad settings are refused with
// exit 2 naming them.
func TestSampleBD3LM(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	version := trainTinyLM(t, root, "block_size = 16", "block_size = 16")

	args := []string{"--checkpoint", version, "--prompt", samplePrompt, "--prompt", "Tina has 3 books.", "--steps", "4", "--top-p", "0.9"}
	a := sampleJSON(t, append(args, "--seed", "1")...)
	b := sampleJSON(t, append(args, "--seed", "1")...)
	c := sampleJSON(t, append(args, "--seed", "2")...)
	if len(a) != 2 {
		t.Fatalf("%d generations for 2 prompts", len(a))
	}
	same := func(x, y map[string]any) bool {
		jx, _ := json.Marshal([]any{x["tokens"], x["text"]})
		jy, _ := json.Marshal([]any{y["tokens"], y["text"]})
		return bytes.Equal(jx, jy)
	}
	for i := range a {
		if !same(a[i], b[i]) {
			t.Errorf("prompt %d: seed 1 twice gave different generations:\n%v\n%v", i, a[i]["text"], b[i]["text"])
		}
		toks, _ := a[i]["tokens"].([]any)
		if len(toks) == 0 || len(toks)%16 != 0 {
			t.Errorf("prompt %d: %d generated tokens, want whole blocks of 16", i, len(toks))
		}
		for _, v := range toks {
			if id := int64(v.(float64)); id < 0 || id > tokens.EndOfText {
				t.Errorf("prompt %d: token id %d outside GPT-2's vocabulary (or the mask)", i, id)
			}
		}
		if runs := a[i]["model_runs"].(float64); runs < 1 || runs > 4*a[i]["blocks"].(float64) {
			t.Errorf("prompt %d: %v model runs for %v blocks of 4 steps", i, runs, a[i]["blocks"])
		}
	}
	if same(a[0], c[0]) && same(a[1], c[1]) {
		t.Errorf("seeds 1 and 2 sampled the same text at temperature 1: %v", a[0]["text"])
	}
	// Greedy decoding revealing a whole block in one step draws nothing.
	g1 := sampleJSON(t, "--checkpoint", version, "--prompt", samplePrompt, "--temperature", "0", "--steps", "1", "--seed", "1")
	g2 := sampleJSON(t, "--checkpoint", version, "--prompt", samplePrompt, "--temperature", "0", "--steps", "1", "--seed", "2")
	if !same(g1[0], g2[0]) {
		t.Errorf("greedy decoding differs between seeds")
	}

	// eval --generate answers validation questions and scores them.
	var out, errOut bytes.Buffer
	outDir := filepath.Join(root, "gen")
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--set", `data.val="` + filepath.Join(root, "train.jsonl") + `"`,
		"--generate", "3", "--steps", "2", "--out-dir", outDir, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("eval --generate: exit %d: %s", code, errOut.String())
	}
	var res struct{ Mean map[string]float64 }
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if acc, ok := res.Mean["val/exact_match"]; !ok || acc < 0 || acc > 1 || res.Mean["val/generated"] != 3 || !(res.Mean["val/ppl"] > 1) {
		t.Errorf("eval --generate 3: %v; want val/exact_match in [0, 1] over 3 answers beside val/ppl", res.Mean)
	}
	gens, err := os.ReadFile(filepath.Join(outDir, "generations.jsonl"))
	if n := strings.Count(string(gens), "\n"); err != nil || n != 3 || !strings.Contains(string(gens), `"expected":"`) {
		t.Errorf("generations.jsonl: %d lines, %v; want 3 answers with their expected final answer", n, err)
	}
	// Results in the way are refused before any answer is generated; a
	// question the model cannot take counts as wrong, the rest answered.
	errOut.Reset()
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--set", `data.val="` + filepath.Join(root, "train.jsonl") + `"`,
		"--generate", "3", "--out-dir", outDir}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "metrics.json exists") || strings.Contains(errOut.String(), "generated") {
		t.Errorf("eval --generate into earlier results: exit %d, %q; want 2 before generating", code, errOut.String())
	}
	withLong := filepath.Join(root, "long.jsonl")
	questions, _ := os.ReadFile(filepath.Join(root, "train.jsonl"))
	longQ, _ := json.Marshal(map[string]string{"question": strings.Repeat("How many apples are left now? ", 30), "answer": "1+1=<<1+1=2>>2\n#### 2"})
	os.WriteFile(withLong, append(append(longQ, '\n'), questions...), 0o644)
	errOut.Reset()
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--set", `data.val="` + withLong + `"`,
		"--generate", "2", "--steps", "2", "--out-dir", filepath.Join(root, "gen-long")}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "1 of 2 validation questions could not be put to the model") {
		t.Errorf("eval --generate with a question longer than the model: exit %d, %q; want 0 counting it as wrong", code, errOut.String())
	}
	gens, _ = os.ReadFile(filepath.Join(root, "gen-long", "generations.jsonl"))
	if strings.Count(string(gens), `"not_generated":"the prompt is`) != 1 || strings.Count(string(gens), "\n") != 2 {
		t.Errorf("generations.jsonl with a long question: %s", gens)
	}

	for _, args := range [][]string{
		{"--steps", "2"},                    // decoding flags need --generate
		{"--generate", "2"},                 // no data.val in the run's configuration
		{"--generate", "0"},                 // nothing to generate
		{"--generate", "2", "--top-p", "2"}, // not a probability
	} {
		errOut.Reset()
		if code := run(append([]string{"ortrain", "eval", "--checkpoint", version, "--out-dir", filepath.Join(root, "e2")}, args...), &out, &errOut); code != 2 {
			t.Errorf("eval %v: exit %d, %q; want 2", args, code, errOut.String())
		}
	}

	long := strings.Repeat("How many apples are left now? ", 30)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--steps", "0"}, "--steps 0"},
		{[]string{"--temperature", "-1"}, "--temperature"},
		{[]string{"--top-p", "0"}, "--top-p"},
		{[]string{"--block-size", "8"}, "blocks of 16"},
		{[]string{"--prompt", long}, "leaves no block"},
		{[]string{"--prompt", ""}, "prompt is empty"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"ortrain", "sample", "--checkpoint", version}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "--prompt") {
			args = append(args, "--prompt", samplePrompt)
		}
		if code := run(args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("sample %v: exit %d, %q; want 2 naming %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestSampleHDP: a model trained on HDP-Diffusion's segments generates its
// plan and its execution given the question; a question longer than the
// question segment is refused.
func TestSampleHDP(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	version := trainTinyLM(t, t.TempDir(), "blocks = [48, 32, 48]", "segments = [48, 32, 48]")
	g := sampleJSON(t, "--checkpoint", version, "--prompt", samplePrompt, "--steps", "3", "--seed", "5")
	if toks, _ := g[0]["tokens"].([]any); len(toks) != 80 || g[0]["blocks"].(float64) != 2 {
		t.Errorf("HDP generation: %v blocks, %d tokens; want the plan and execution segments (2 blocks, 80 tokens)", g[0]["blocks"], len(toks))
	}
	var out, errOut bytes.Buffer
	long := strings.Repeat("apples ", 60)
	if code := run([]string{"ortrain", "sample", "--checkpoint", version, "--prompt", long}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "question segment holds 48") {
		t.Errorf("a question longer than its segment: exit %d, %q; want 2", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"ortrain", "sample", "--checkpoint", version, "--prompt", strings.Repeat("apples ", 200)}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "question segment holds 48") {
		t.Errorf("a question longer than the model: exit %d, %q; want 2", code, errOut.String())
	}
	if code := run([]string{"ortrain", "sample", "--checkpoint", version, "--prompt", "x", "--block-size", "16"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "segments") {
		t.Errorf("--block-size with a segmented model: exit %d, %q; want 2", code, errOut.String())
	}
}

// TestSampleRefusesOtherRecipes: a checkpoint of a classifier cannot sample
// text, and says so with exit 2.
func TestSampleRefusesOtherRecipes(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	art := filepath.Join(root, "art")
	linearArtifacts(t, art)
	cfg := filepath.Join(root, "run.toml")
	body := `name = "lin"
output_dir = "` + filepath.Join(root, "outputs") + `"
[model]
artifacts = "` + art + `"
[data]
kind = "synthetic"
batch_size = 16
num_workers = 1
[trainer]
device = "cpu"
max_steps = 1
`
	os.WriteFile(cfg, []byte(body), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	errOut.Reset()
	version := filepath.Join(root, "outputs", "lin", "version_0")
	if code := run([]string{"ortrain", "sample", "--checkpoint", version, "--prompt", "hi"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "bd3lm") {
		t.Errorf("sample of a classifier: exit %d, %q; want 2 saying it needs bd3lm", code, errOut.String())
	}
}
