// Package bench measures ortrain's training memory against PyTorch on the
// same machine: for each case, `ortrain train` runs a few steps of a
// built-in recipe on synthetic data at two batch sizes, each in its own
// process, and so does the recipe's PyTorch twin
// (models/pytorch/bench_memory.py, eager mode). The peak resident memory of
// each process is read from the kernel (getrusage); the slope between the two
// batch sizes is the memory per sample, in which fixed costs (weights,
// optimizer state, libraries) cancel.
package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/BurntSushi/toml"

	"github.com/ortrain/ortrain/training/config"
)

// Case is one measured configuration.
type Case struct {
	Name      string
	Recipe    string
	Params    map[string]any
	Optimizer map[string]any // [optimizer] keys: name, lr, momentum
	Batches   [2]int         // the memory benchmark's two batch sizes; the speed benchmark's small size takes the second
	// Preset is the configuration whose model, batch and recompute the
	// speed benchmark takes at the users' sizes.
	Preset string
}

// Cases are the three model families at sizes a 2-core machine measures
// in minutes: ResNet-50 at 224² as users train it, and the transformer and
// the 3D VQ-GAN at reduced widths.
var Cases = []Case{
	{Name: "resnet50", Recipe: "resnet", Params: map[string]any{"depth": 50},
		Optimizer: map[string]any{"name": "sgd", "lr": 0.1, "momentum": 0.9}, Batches: [2]int{4, 8}, Preset: "resnet50-a10g-balanced"},
	{Name: "bd3lm", Recipe: "bd3lm", Params: map[string]any{"hidden": 256, "layers": 4, "heads": 4, "seq_len": 256, "block_size": 16},
		Optimizer: map[string]any{"name": "adamw", "lr": 3e-4}, Batches: [2]int{2, 4}, Preset: "bd3lm-gsm8k-h200"},
	{Name: "vqgan3d", Recipe: "vqgan3d", Params: map[string]any{"channels": 16, "channel_mult": []int{1, 2}, "res_blocks": 1,
		"patch_size": []int{32, 32, 32}, "groups": 8, "codebook_size": 256},
		Optimizer: map[string]any{"name": "adamw", "lr": 3e-4}, Batches: [2]int{2, 4}, Preset: "vqgan3d-h200"},
}

// Lookup returns the case named name.
func Lookup(name string) (Case, bool) {
	i := slices.IndexFunc(Cases, func(c Case) bool { return c.Name == name })
	if i < 0 {
		return Case{}, false
	}
	return Cases[i], true
}

// Result is a case measured: peak resident bytes per batch size.
type Result struct {
	Case    Case
	Ortrain [2]int64
	// Step is the step's peak in ONNX Runtime's allocator
	// (memory/step_peak_bytes): the activations without the process's
	// libraries, heap and the arena's unused reserve.
	Step  [2]int64
	Torch [2]int64 // zero when PyTorch was not run
}

// PerSample returns the slope of peak memory over batch size, in bytes.
func (r Result) PerSample(peaks [2]int64) float64 {
	return float64(peaks[1]-peaks[0]) / float64(r.Case.Batches[1]-r.Case.Batches[0])
}

// Options say what to run.
type Options struct {
	Ortrain string // the ortrain binary
	Python  string // the interpreter with PyTorch; "" skips the twin
	Script  string // models/pytorch/bench_memory.py
	Steps   int
	Dir     string // scratch directory for runs
	// Recompute is ortrain's model.recompute (autodiff.RecomputePolicies);
	// "" is the default. The twin always keeps what eager PyTorch keeps.
	Recompute string
	Log       io.Writer // progress lines
}

// Memory measures c.
func Memory(c Case, o Options) (Result, error) {
	res := Result{Case: c}
	for i, batch := range c.Batches {
		fmt.Fprintf(o.Log, "bench %s: ortrain train, batch %d...\n", c.Name, batch)
		rss, step, err := ortrainPeak(c, batch, o, i)
		if err != nil {
			return res, err
		}
		res.Ortrain[i], res.Step[i] = rss, step
		if o.Python == "" {
			continue
		}
		fmt.Fprintf(o.Log, "bench %s: PyTorch twin, batch %d...\n", c.Name, batch)
		if res.Torch[i], err = torchPeak(c, batch, o); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Config is the run configuration that measures c at batch: a few steps
// of its recipe on synthetic data, on the CPU in float32, logging every
// step and writing no checkpoint, under outputDir.
func Config(c Case, batch, steps int, recompute, outputDir string) map[string]any {
	model := map[string]any{"recipe": c.Recipe, "params": c.Params}
	if recompute != "" {
		model["recompute"] = recompute
	}
	return map[string]any{
		"name": c.Name, "output_dir": outputDir,
		"model": model,
		"data":  map[string]any{"kind": config.KindSynthetic, "batch_size": batch, "num_workers": 0},
		"trainer": map[string]any{"device": "cpu", "max_steps": steps, "precision": "32",
			"checkpoint_every_n_steps": 0, "log_every_n_steps": 1},
		"optimizer": c.Optimizer,
	}
}

// WriteConfig writes cfg as TOML to path.
func WriteConfig(path string, cfg map[string]any) error {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(cfg); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// StepPeak reads the last memory/step_peak_bytes a run under outputDir
// logged: ONNX Runtime's allocator peak of the training graph.
func StepPeak(outputDir string) (int64, error) {
	files, _ := filepath.Glob(filepath.Join(outputDir, "*", "version_*", "metrics.csv"))
	if len(files) != 1 {
		return 0, fmt.Errorf("bench: want one metrics.csv under %s, found %d", outputDir, len(files))
	}
	f, err := os.Open(files[0])
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("bench: %s: %v", files[0], err)
	}
	peak := int64(-1)
	for _, r := range rows {
		if len(r) >= 3 && r[1] == "memory/step_peak_bytes" {
			v, err := strconv.ParseFloat(r[2], 64)
			if err != nil {
				return 0, fmt.Errorf("bench: %s: %q is not a number", files[0], r[2])
			}
			peak = int64(v)
		}
	}
	if peak < 0 {
		return 0, fmt.Errorf("bench: %s logs no memory/step_peak_bytes", files[0])
	}
	return peak, nil
}

// ortrainPeak runs c at batch and returns the process's peak resident
// memory and the training graph's allocator peak.
func ortrainPeak(c Case, batch int, o Options, i int) (rss, step int64, err error) {
	dir := filepath.Join(o.Dir, fmt.Sprintf("%s-%d", c.Name, i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	out := filepath.Join(dir, "outputs")
	path := filepath.Join(dir, "bench.toml")
	if err := WriteConfig(path, Config(c, batch, o.Steps, o.Recompute, out)); err != nil {
		return 0, 0, err
	}
	if rss, err = peakOf(exec.Command(o.Ortrain, "train", "--config", path)); err != nil {
		return 0, 0, err
	}
	step, err = StepPeak(out)
	return rss, step, err
}

func torchPeak(c Case, batch int, o Options) (int64, error) {
	params, _ := json.Marshal(c.Params)
	opt, _ := json.Marshal(c.Optimizer)
	cmd := exec.Command(o.Python, o.Script, c.Recipe, string(params), strconv.Itoa(batch), string(opt), "--steps", strconv.Itoa(o.Steps))
	var out bytes.Buffer
	cmd.Stdout = &out
	if _, err := peakOf(cmd); err != nil {
		return 0, err
	}
	fields := strings.Fields(out.String())
	if len(fields) == 0 {
		return 0, fmt.Errorf("bench: %s printed nothing", o.Script)
	}
	// The script reports its own peak, without the interpreter's wrapper.
	return strconv.ParseInt(fields[len(fields)-1], 10, 64)
}

// peakOf runs cmd and returns its peak resident memory in bytes.
func peakOf(cmd *exec.Cmd) (int64, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		err = fmt.Errorf("bench: %s: %v\n%s", strings.Join(cmd.Args, " "), err, lastLines(stderr.String(), 8))
		if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 2 {
			err = refused{err} // the run refused its configuration: bad input, as there
		}
		return 0, err
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, fmt.Errorf("bench: no resource usage for %s", cmd.Path)
	}
	return ru.Maxrss * 1024, nil // kilobytes on Linux
}

// refused is a run's refusal of its configuration (exit 2), which bench
// passes on as bad input.
type refused struct{ error }

func (refused) BadInput() bool  { return true }
func (r refused) Unwrap() error { return r.error }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Table writes the results, one line per case: MB per sample for ortrain
// (resident memory, and its training graph in ONNX Runtime's allocator)
// and PyTorch (resident), and the ratio of the resident figures.
func Table(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-10s %-8s %14s %14s %14s %14s %8s\n", "case", "batches", "ortrain peak", "ortrain/sample", "ort step/sample", "torch/sample", "ratio")
	for _, r := range rs {
		b := r.Case.Batches
		o := r.PerSample(r.Ortrain)
		line := fmt.Sprintf("%-10s %-8s %11.0f MB %11.1f MB %12.1f MB", r.Case.Name, fmt.Sprintf("%d,%d", b[0], b[1]), float64(r.Ortrain[1])/1e6, o/1e6, r.PerSample(r.Step)/1e6)
		if r.Torch[1] > 0 {
			t := r.PerSample(r.Torch)
			line += fmt.Sprintf(" %11.1f MB %8.2f", t/1e6, o/t)
		}
		fmt.Fprintln(w, line)
	}
}
