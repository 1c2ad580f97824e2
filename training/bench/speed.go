package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

// Sizes of the speed benchmark: Small are the cases' own sizes (minutes on
// a 2-core machine, what CI runs), Users the presets' models and batches
// (the users' runs on a GPU).
const (
	Small = "small"
	Users = "users"
)

// SpeedOptions say what the speed benchmark runs.
type SpeedOptions struct {
	Ortrain   string // the ortrain binary
	Size      string // Small or Users
	Device    string // trainer.device: cpu or cuda:N
	Precision string // trainer.precision
	Batch     int    // per step; 0 takes the size's
	Warmup    int    // steps run before the measured ones
	Steps     int    // measured steps
	Workers   int    // data.num_workers
	// Recompute is model.recompute; "" keeps the size's (the presets'
	// choice at Users sizes).
	Recompute string
	// Sets are configuration overrides (key=value, as train's --set)
	// applied last: what a run compares (model.conv_grad=ops,
	// runtime.cudnn_conv_algo_search=HEURISTIC).
	Sets []string
	// Profile trains the case once more with ONNX Runtime's profile
	// (train --profile) and reads where its measured steps go (Speed.Profile).
	Profile bool
	Python  string   // the interpreter with PyTorch; "" skips the twins
	Script  string   // models/pytorch/bench_speed.py
	Modes   []string // the twins' modes: eager, amp, compile
	Dir     string   // scratch directory for runs
	Log     io.Writer
}

// TorchModes are the PyTorch twins' modes: eager at ortrain's precision
// (float32, TF32 on a GPU when ortrain's is tf32), eager with automatic
// mixed precision (bfloat16, or float16 with a gradient scaler when
// ortrain's precision is 16-mixed), and torch.compile of the eager model
// at ortrain's precision.
var TorchModes = []string{"eager", "amp", "compile"}

// Speed is one case measured for speed.
type Speed struct {
	Case      string
	Device    string
	Precision string
	Sets      []string // the configuration overrides it ran with
	Batch     int
	SeqLen    int // token positions per sample; 0 for other models
	Steps     int // measured
	StepMS    float64
	HostMS    float64  // per step, outside ONNX Runtime's runs and the data wait
	WaitFrac  float64  // share of the step spent waiting for data
	PeakBytes int64    // the training graph's peak in ONNX Runtime's allocator (the device's arena on a GPU)
	RSSBytes  int64    // the process's peak resident memory
	Profile   *Profile // with SpeedOptions.Profile, from a second run
	Torch     []TorchSpeed
}

// SamplesPerS is the throughput of the measured steps.
func (s Speed) SamplesPerS() float64 { return float64(s.Batch) * 1e3 / s.StepMS }

// TorchSpeed is one PyTorch twin's measurement; Unavailable says why a
// mode did not run (torch.compile on a PyTorch without it).
type TorchSpeed struct {
	Mode        string  `json:"mode"`
	Precision   string  `json:"precision"`
	StepMS      float64 `json:"step_ms"`
	PeakBytes   int64   `json:"peak_bytes"` // the device's allocator peak on a GPU, the process's resident peak on the CPU
	Unavailable string  `json:"unavailable"`
}

// speedRun is a case's configuration at a size: the model and its
// parameters, the batch, the optimizer and the data.
type speedRun struct {
	cfg    *config.Config
	params map[string]any
	seqLen int
}

// speedConfig is the run configuration that measures c: its recipe at
// o's size, on synthetic data (synthetic GSM8K text through the tokens
// loader for the diffusion LM, whose inputs are its own noising of token
// ids), warmup+steps optimizer steps of one batch each, a constant LR,
// every step logged, no validation and no checkpoint before the end.
func speedConfig(c Case, o SpeedOptions, dir string) (speedRun, error) {
	cfg := config.Default()
	params := c.Params
	batch := c.Batches[1]
	if o.Size == Users {
		pc, err := configs.Load(c.Preset)
		if err != nil {
			return speedRun{}, err
		}
		cfg.Model.Recompute = pc.Model.Recompute
		params, batch = pc.Model.Params, pc.Data.BatchSize
		cfg.Data.Tokens = pc.Data.Tokens
	}
	if o.Batch > 0 {
		batch = o.Batch
	}
	if o.Recompute != "" {
		cfg.Model.Recompute = o.Recompute
	}
	cfg.Name, cfg.OutputDir = c.Name, filepath.Join(dir, "outputs")
	cfg.Model.Recipe, cfg.Model.Params = c.Recipe, params
	cfg.Data.Kind, cfg.Data.BatchSize, cfg.Data.NumWorkers = config.KindSynthetic, batch, o.Workers
	run := speedRun{cfg: cfg, params: params}
	if c.Recipe == "bd3lm" {
		seqLen, blockSize := intParam(params, "seq_len"), intParam(params, "block_size")
		if seqLen == 0 || blockSize == 0 {
			return run, fmt.Errorf("bench %s: model.params needs seq_len and block_size", c.Name)
		}
		run.seqLen = seqLen
		cfg.Data.Kind, cfg.Data.Train = config.KindTokens, filepath.Join(dir, "gsm8k.jsonl")
		cfg.Data.Tokens.SeqLen, cfg.Data.Tokens.BlockSize = seqLen, blockSize
		// Enough problems that no epoch ends inside the measured steps.
		if err := synthetic.WriteGSM8K(cfg.Data.Train, max(256, batch*(o.Warmup+o.Steps+1)), 1); err != nil {
			return run, err
		}
	}
	t := &cfg.Trainer
	t.Device, t.Precision = o.Device, config.Precision(o.Precision)
	t.MaxSteps, t.MaxEpochs = int64(o.Warmup+o.Steps), 0
	t.LogEveryNSteps, t.CheckpointEveryNSteps = 1, 0
	t.ValCheckInterval, t.LimitValBatches = config.Interval{Steps: math.MaxInt32}, 1
	cfg.Optimizer.Name = c.Optimizer["name"].(string)
	cfg.Optimizer.LR = c.Optimizer["lr"].(float64)
	if m, ok := c.Optimizer["momentum"].(float64); ok {
		cfg.Optimizer.Momentum = m
	}
	cfg.Scheduler.Name = "constant"
	if err := cfg.Override(o.Sets...); err != nil {
		return run, err
	}
	return run, nil
}

// intParam reads an integer recipe parameter, as Go code (int) or TOML
// (int64) writes it; 0 when absent.
func intParam(params map[string]any, key string) int {
	switch v := params[key].(type) {
	case int:
		return v
	case int64:
		return int(v)
	}
	return 0
}

// MeasureSpeed trains c for o.Warmup+o.Steps steps in its own process and
// reads the measured steps' times from the run's metrics.csv, then runs
// the PyTorch twins at the same size, batch and precision.
func MeasureSpeed(c Case, o SpeedOptions) (Speed, error) {
	dir := filepath.Join(o.Dir, c.Name+"-speed")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Speed{}, err
	}
	run, err := speedConfig(c, o, dir)
	if err != nil {
		return Speed{}, err
	}
	toml, err := run.cfg.Encode()
	if err != nil {
		return Speed{}, err
	}
	path := filepath.Join(dir, "bench.toml")
	if err := os.WriteFile(path, toml, 0o644); err != nil {
		return Speed{}, err
	}
	s := Speed{Case: c.Name, Device: o.Device, Precision: o.Precision, Sets: o.Sets, Batch: run.cfg.Data.BatchSize, SeqLen: run.seqLen}
	fmt.Fprintf(o.Log, "bench %s: ortrain train, batch %d, %d+%d steps on %s, precision %s...\n", c.Name, s.Batch, o.Warmup, o.Steps, o.Device, o.Precision)
	if s.RSSBytes, err = peakOf(exec.Command(o.Ortrain, "train", "--config", path)); err != nil {
		return s, err
	}
	if err := readSteps(&s, run.cfg.OutputDir, int64(o.Warmup)); err != nil {
		return s, err
	}
	if o.Profile {
		// A run of its own: profiling slows the steps it records (on a
		// GPU, train --profile launches synchronously).
		fmt.Fprintf(o.Log, "bench %s: ortrain train again, with ONNX Runtime's profile...\n", c.Name)
		prefix := filepath.Join(dir, "profile", "ort")
		cmd := exec.Command(o.Ortrain, "train", "--config", path, "--set", "output_dir="+filepath.Join(dir, "profiled"), "--profile", prefix)
		if _, err := peakOf(cmd); err != nil {
			return s, err
		}
		p, err := ReadProfile(prefix, o.Warmup, o.Steps)
		if err != nil {
			return s, err
		}
		s.Profile = &p
	}
	if o.Python == "" {
		return s, nil
	}
	for _, mode := range o.Modes {
		fmt.Fprintf(o.Log, "bench %s: PyTorch twin, %s...\n", c.Name, mode)
		ts, err := torchSpeed(c, run, mode, o)
		if err != nil {
			return s, err
		}
		s.Torch = append(s.Torch, ts)
	}
	return s, nil
}

// readSteps averages the training rows logged after the warm-up steps.
func readSteps(s *Speed, outputDir string, warmup int64) error {
	files, _ := filepath.Glob(filepath.Join(outputDir, "*", "version_*", "metrics.csv"))
	if len(files) != 1 {
		return fmt.Errorf("bench: want one metrics.csv under %s, found %d", outputDir, len(files))
	}
	f, err := os.Open(files[0])
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return fmt.Errorf("bench: %s: %v", files[0], err)
	}
	var stepMS, hostMS, wait float64
	for _, r := range rows[1:] {
		step, err := strconv.ParseInt(r[0], 10, 64)
		if err != nil || step <= warmup {
			continue
		}
		v, err := strconv.ParseFloat(r[2], 64)
		if err != nil {
			return fmt.Errorf("bench: %s: %q is not a number", files[0], r[2])
		}
		switch r[1] {
		case "time/step_ms":
			stepMS += v
			s.Steps++
		case "time/host_ms":
			hostMS += v
		case "time/data_wait_frac":
			wait += v
		case "memory/step_peak_bytes":
			s.PeakBytes = max(s.PeakBytes, int64(v))
		}
	}
	if s.Steps == 0 {
		return fmt.Errorf("bench: %s logs no step after the %d warm-up steps", files[0], warmup)
	}
	n := float64(s.Steps)
	s.StepMS, s.HostMS, s.WaitFrac = stepMS/n, hostMS/n, wait/n
	return nil
}

// torchSpeed runs the PyTorch twin of c in one mode and reads the JSON
// line it prints last.
func torchSpeed(c Case, run speedRun, mode string, o SpeedOptions) (TorchSpeed, error) {
	params, err := json.Marshal(run.params)
	if err != nil {
		return TorchSpeed{}, err
	}
	opt, _ := json.Marshal(c.Optimizer)
	cmd := exec.Command(o.Python, o.Script, c.Recipe, string(params), strconv.Itoa(run.cfg.Data.BatchSize), string(opt),
		"--mode", mode, "--device", o.Device, "--precision", o.Precision,
		"--warmup", strconv.Itoa(o.Warmup), "--steps", strconv.Itoa(o.Steps))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); ok {
			// PyTorch itself failed in this mode (Debian's 1.13 has no
			// bfloat16 GroupNorm on the CPU): the row says so, and the
			// other rows still count.
			return TorchSpeed{Mode: mode, Unavailable: "PyTorch failed: " + lastLines(stderr.String(), 1)}, nil
		}
		return TorchSpeed{}, fmt.Errorf("bench: %s: %v", strings.Join(cmd.Args, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var ts TorchSpeed
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ts); err != nil {
		return ts, fmt.Errorf("bench: %s printed %q, not its JSON line", o.Script, lines[len(lines)-1])
	}
	return ts, nil
}

// SpeedTable writes one line per case and one per PyTorch twin, with
// ortrain's throughput over the twin's.
func SpeedTable(w io.Writer, rs []Speed) {
	fmt.Fprintf(w, "%-9s %-16s %-14s %5s %10s %10s %9s %8s %6s %9s %9s %s\n",
		"case", "run", "precision", "batch", "samples/s", "tokens/s", "step ms", "host ms", "wait%", "peak MB", "RSS MB", "ortrain/torch")
	for _, r := range rs {
		tokens := "-"
		if r.SeqLen > 0 {
			tokens = fmt.Sprintf("%.0f", r.SamplesPerS()*float64(r.SeqLen))
		}
		run := "ortrain " + r.Device
		if len(r.Sets) > 0 {
			run += " " + strings.Join(r.Sets, " ")
		}
		fmt.Fprintf(w, "%-9s %-16s %-14s %5d %10.2f %10s %9.1f %8.2f %6.1f %9.0f %9.0f\n",
			r.Case, run, r.Precision, r.Batch, r.SamplesPerS(), tokens, r.StepMS, r.HostMS, 100*r.WaitFrac,
			float64(r.PeakBytes)/1e6, float64(r.RSSBytes)/1e6)
		for _, t := range r.Torch {
			if t.Unavailable != "" {
				fmt.Fprintf(w, "%-9s %-16s %s\n", r.Case, "torch "+t.Mode, "not run: "+t.Unavailable)
				continue
			}
			sps := float64(r.Batch) * 1e3 / t.StepMS
			tokens := "-"
			if r.SeqLen > 0 {
				tokens = fmt.Sprintf("%.0f", sps*float64(r.SeqLen))
			}
			fmt.Fprintf(w, "%-9s %-16s %-14s %5d %10.2f %10s %9.1f %8s %6s %9.0f %9s %.2f\n",
				r.Case, "torch "+t.Mode, t.Precision, r.Batch, sps, tokens, t.StepMS, "-", "-", float64(t.PeakBytes)/1e6, "-", t.StepMS/r.StepMS)
		}
	}
}
