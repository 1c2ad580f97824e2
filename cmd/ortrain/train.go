package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/callback"
	"github.com/ortrain/ortrain/training/collective"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/tokens"
	"github.com/ortrain/ortrain/training/rundir"
	"github.com/ortrain/ortrain/training/setup"
	"github.com/ortrain/ortrain/training/trainer"
)

func trainCommand() *cli.Command {
	return &cli.Command{
		Name:      "train",
		Usage:     "train a model: outputs/<name>/version_N with config, metrics, TensorBoard events, checkpoints",
		UsageText: "ortrain train (--config CONFIG | --preset NAME) [--set key=value]... [--resume last|PATH] [--run-dir DIR [--overwrite]]",
		Description: `Trains on the device trainer.device names with weights and optimizer state
kept there for the whole run. The first SIGINT/SIGTERM finishes the current
micro-batch (a step of several is dropped and redone on resume), writes a
checkpoint and exits 0; a second exits at once (the newest
checkpoint stays whole; the same signal again within 1.5 s, as GNU
timeout sends it, counts once). A signal during setup exits 130 at once
and leaves nothing: the new run directory is removed, an overwritten one
keeps its old run. --overwrite replaces a run directory's contents only
once the new run has taken its first step, and only those of a run: a
command that fails, panics or is stopped before then puts the old run
back, and one killed outright leaves it aside in the directory, where the
next train on it (--resume, --run-dir) puts it back.

Examples:
   ortrain train --config resnet.toml --set trainer.max_steps=1000
   ortrain train --preset vqgan3d-h200 --set data.train=/data/ct/train
   ortrain train --config resnet.toml --resume last
   ortrain train --config resnet.toml --resume outputs/resnet/version_3/checkpoints/step-000001000`,
		Flags: append(configFlags(),
			&cli.StringFlag{Name: "resume", Usage: "last (newest checkpoint of the newest version of this run name), a checkpoint directory or a version directory"},
			&cli.StringFlag{Name: "run-dir", Usage: "write the run here instead of <output_dir>/<name>/version_N"},
			&cli.BoolFlag{Name: "overwrite", Usage: "with --run-dir: replace the contents of an existing run directory"},
			&cli.StringFlag{Name: "profile", Usage: "record ONNX Runtime's per-node run times into PREFIX_<date>.json, one file per graph (Chrome trace format); on a GPU with synchronous launches (CUDA_LAUNCH_BLOCKING=1, unless set), so that a node's time is its own kernels'"},
		),
		Action: trainAction,
	}
}

func trainAction(c *cli.Context) error {
	switch {
	case c.IsSet("resume") && c.String("resume") == "":
		return usageError{errors.New("--resume is empty (an unset variable?): give last, best, a checkpoint directory or a run's version directory, or leave --resume out for a new run")}
	case c.String("resume") != "" && c.IsSet("run-dir"):
		return usageError{errors.New("--resume continues the run in its own directory; --run-dir names a new run's directory: give one of them (to branch a run, copy its directory and resume the copy)")}
	case c.Bool("overwrite") && c.String("run-dir") == "":
		return usageError{errors.New("--overwrite replaces the run in --run-dir DIR: give --run-dir (a new run without it takes the next version_N, overwriting nothing)")}
	}
	cfg, err := readConfig(c)
	if err != nil {
		return err
	}
	if err := cfg.Resolve(); err != nil {
		return err
	}
	if err := adoptArtifacts(cfg); err != nil {
		return err
	}
	if err := recoverOverwrites(c.App.ErrWriter, cfg, c.String("resume")); err != nil {
		return err
	}
	_, err = train(c, cfg, c.String("resume"), c.String("run-dir"), c.Bool("overwrite"))
	return err
}

// adoptArtifacts gives a run on prebuilt artifacts (model.artifacts) their
// optimizer settings where the config leaves them unset, before the run's
// config.toml is written (setup.AdoptOptimizer).
func adoptArtifacts(cfg *config.Config) error {
	if cfg.Model.Artifacts == "" {
		return nil
	}
	m, err := artifacts.Load(cfg.Model.Artifacts)
	if err != nil {
		return &config.Error{Key: "model.artifacts", Msg: fmt.Sprintf("%s: %v", cfg.Model.Artifacts, err)}
	}
	return setup.AdoptOptimizer(cfg, m)
}

// train runs a resolved configuration: a new version directory, or the one
// resume names, or runDir; it returns the run directory.
func train(c *cli.Context, cfg *config.Config, resume, runDir string, overwrite bool) (_ string, err error) {
	if err := loadORTOn(c, cfg.ORTLib, cfg.Trainer.Device); err != nil {
		return "", err
	}
	// Prebuilt artifacts and the data are checked before a run directory
	// is made, so a typo leaves no empty version behind.
	providers, _ := ort.AvailableProviders()
	opts, err := cfg.SessionOptions(slices.Contains(providers, "CUDAExecutionProvider"))
	if err != nil {
		return "", err
	}
	syncLaunchesForProfile(c.App.ErrWriter, c.String("profile"), opts.Device)
	if world := cfg.Trainer.WorldSize(); world > 1 || cfg.Trainer.Strategy == "ddp" {
		if _, _, ncclErr := collective.NCCLAvailable(); opts.Device.CUDA && ncclErr != nil {
			// A GPU that is not usable is the problem to state before
			// how GPU ranks would talk (NCCL). (Checked only here: a
			// session on the GPU would keep a CUDA context in this
			// launcher for the whole run.)
			if err := usableDevice("trainer.device", opts); err != nil {
				if cfg.Trainer.Device != "auto" {
					return "", err
				}
				opts.Device = ort.CPU // the ranks fall back alike, and say so
			}
		}
		if _, launched := collective.Launched(); !launched {
			// A resume the ranks would refuse is refused once, here,
			// before any is started.
			if resume != "" {
				ck, _, err := rundir.FindCheckpoint("--resume", resume, cfg.OutputDir, cfg.Name)
				if err != nil {
					return "", err
				}
				if err := trainer.CheckResume(cfg, ck); err != nil {
					return "", err
				}
			}
			return "", spawnRanks(c, cfg, world, opts.Device.CUDA)
		}
	}
	comm, err := joinJob(cfg)
	if err != nil {
		return "", err
	}
	if comm != nil && opts.Device.CUDA {
		if opts.Device.ID, err = rankGPU(cfg, opts.Device.ID); err != nil {
			return "", err
		}
	}
	if err := usableDevice("trainer.device", opts); err != nil {
		if cfg.Trainer.Device != "auto" {
			return "", err
		}
		// auto takes the GPU when it works, else the CPU (npm's CPU builds
		// list a CUDA provider whose libraries they do not ship).
		fmt.Fprintf(c.App.ErrWriter, "ortrain: trainer.device = \"auto\": %v; training on the CPU\n", err)
		opts.Device = ort.CPU
	}
	if comm != nil && comm.Rank() != 0 {
		return "", trainRank(c, cfg, comm, resume, opts)
	}
	// From here SIGINT/SIGTERM end setup at once, undoing what it made,
	// and then interrupt training (see signals).
	sig := watchSignals(c.App.ErrWriter)
	defer sig.stop()
	var prep prepared
	if cfg.Model.Artifacts != "" {
		if err := prep.load(cfg, "", opts); err != nil {
			return "", err
		}
	}
	// What this command creates, it removes if setup fails.
	namesDir := filepath.Join(cfg.OutputDir, cfg.Name)
	_, statErr := os.Stat(namesDir)
	newNamesDir := os.IsNotExist(statErr)
	_, statErr = os.Stat(cfg.OutputDir)
	newOutputDir := os.IsNotExist(statErr)
	var rd *rundir.Dir
	var ck string
	var undo func() string
	// A new version (or a --run-dir this command made) whose setup fails
	// (artifacts that do not build, data that does not open, initial
	// weights refused), panics or is interrupted is removed, and an
	// overwritten --run-dir gets its old run back: a failed command leaves
	// nothing.
	err = sig.creating(func() (func() string, error) {
		var err error
		if rd, ck, err = openRunDir(cfg, resume, runDir, overwrite, runInputs(c, cfg)); err != nil {
			return nil, err
		}
		undo = sync.OnceValue(func() string {
			msg, err := rd.Discard()
			if err != nil {
				return fmt.Sprintf("undoing the setup of %s failed: %v", rd.Path, err)
			}
			if runDir == "" && !rd.Resumed && newNamesDir {
				os.Remove(namesDir) // only if empty: other versions stay
				if newOutputDir {
					os.Remove(cfg.OutputDir)
				}
			}
			return msg
		})
		return undo, nil
	})
	if err != nil {
		return "", err
	}
	if rd.Recovered != "" {
		fmt.Fprintln(c.App.ErrWriter, "ortrain: "+rd.Recovered)
	}
	// An overwritten run directory's old run is deleted only once the
	// new run has taken its first step (tx.commit): until then every way
	// this command can end puts it back — an error or a panic in setup or
	// before that step (here), a signal (sig), and a process killed
	// outright (rundir.Recover, when the directory is next opened).
	tx := &overwriteTx{rd: rd, undo: undo}
	sig.setAbandon(tx.abandon)
	started := false
	defer func() {
		// Runs after t.Close (deferred later): the trainer's files are
		// closed before they are removed. Not on err alone: a panic
		// unwinds through here with err still nil.
		switch {
		case !started:
			if msg := undo(); strings.HasPrefix(msg, "undoing") {
				fmt.Fprintln(c.App.ErrWriter, "ortrain: "+msg)
			}
		case !tx.done():
			if msg := tx.abandon(); msg != "" {
				fmt.Fprintf(c.App.ErrWriter, "ortrain: the new run in %s ended before its first step: %s\n", rd.Path, msg)
			}
		}
		rd.Close()
	}()
	enc, err := cfg.Encode()
	if err != nil {
		return "", err
	}
	if prep.artifacts == "" { // built from model.onnx or a recipe into the run directory
		if err := prep.load(cfg, rd.Path, opts); err != nil {
			return "", err
		}
	}
	warnData(c.App.ErrWriter, "data.train", prep.train)
	if prep.val != nil {
		warnData(c.App.ErrWriter, "data.val", prep.val)
	}
	if opts.ProfilePrefix = c.String("profile"); opts.ProfilePrefix != "" {
		// ONNX Runtime writes no profile, and says nothing, where the
		// prefix's folder is missing.
		if err := os.MkdirAll(filepath.Dir(opts.ProfilePrefix), 0o755); err != nil {
			return "", fmt.Errorf("--profile %s: %w", opts.ProfilePrefix, err)
		}
	}
	fmt.Fprintf(c.App.ErrWriter, "ortrain: training %s on %v in %s\n", cfg.Name, opts.Device, rd.Path)
	if comm != nil {
		engine := "MPI"
		if opts.Device.CUDA {
			engine = "NCCL on each rank's GPU, MPI for the step's scalars"
		}
		fmt.Fprintf(c.App.ErrWriter, "ortrain: data-parallel over %d rank%s (%s): each trains on its shard of every step's %d × %d samples; gradients summed before each update; rank 0 writes\n",
			comm.Size(), plural(comm.Size()), engine, comm.Size(), cfg.Data.BatchSize*cfg.Trainer.AccumulateGradBatches)
	}
	if m, err := artifacts.Load(prep.artifacts); err == nil {
		note := ""
		if cfg.Trainer.Precision == config.TF32 && !opts.Device.CUDA {
			note = " (TF32 is a mode of NVIDIA GPUs' tensor cores: on the CPU \"tf32\" trains as \"32\")"
		}
		fmt.Fprintf(c.App.ErrWriter, "ortrain: precision %s: %s%s\n", cfg.Trainer.Precision, m.Precision, note)
		for _, warn := range m.Warnings { // what the build found suspicious in the model
			fmt.Fprintf(c.App.ErrWriter, "ortrain: warning: %s\n", warn)
		}
		if d := m.Optimizer.EMADecay; d > 0 {
			fmt.Fprintf(c.App.ErrWriter, "ortrain: weight EMA %g: validation, eval and export use the averaged weights\n", d)
		}
	}
	t, err := trainer.New(trainer.Options{Config: cfg, Artifacts: prep.artifacts, Session: opts, Train: prep.train, Val: prep.val,
		Dir: rd, Resume: ck, Progress: os.Stderr, Comm: comm, Callbacks: []callback.Callback{commitOnStep{tx, c.App.ErrWriter}}})
	if err != nil {
		return "", err
	}
	defer t.Close()
	if testFault != nil {
		testFault("setup")
	}
	// Written once every check passed: a refused resume adds no
	// config.resume-K.toml.
	if _, err := rd.WriteConfig(enc); err != nil {
		return "", err
	}
	sig.start()
	started = true
	if testFault != nil {
		testFault("started")
	}
	return rd.Path, t.Run(sig.ctx)
}

// testFault, set by tests only (nil in the binary), is called at the end
// of a new run's setup ("setup": the run directory opened and written
// into) and once training started ("started", before the first step): a
// test fails the command there, as a panic would, to check what the
// failure leaves of an overwritten run.
var testFault func(stage string)

// overwriteTx keeps an overwritten run directory's previous run until the
// new run has taken a step: commit deletes it then, abandon puts it back
// when the command ends first. Both at most once, whichever comes first
// (a second signal abandons from the signal handler's goroutine while the
// loop may be committing).
type overwriteTx struct {
	rd   *rundir.Dir
	undo func() string

	mu                sync.Mutex
	committed, undone bool
}

// commit deletes the previous run; the first step was taken.
func (t *overwriteTx) commit() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.committed || t.undone {
		return nil
	}
	t.committed = true
	return t.rd.Commit()
}

// abandon puts an overwritten directory's previous run back (and removes
// what the new run wrote); it says what it did, "" when there was nothing
// to put back.
func (t *overwriteTx) abandon() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.committed || t.undone || !t.rd.Overwriting() {
		return ""
	}
	t.undone = true
	return t.undo()
}

// done reports whether nothing is left to put back.
func (t *overwriteTx) done() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.committed || t.undone || !t.rd.Overwriting()
}

// commitOnStep commits an overwrite at the end of the new run's first
// step, the point from which it has something of its own (a step in
// metrics.csv, soon a checkpoint) to keep in place of the old run.
type commitOnStep struct {
	tx *overwriteTx
	w  io.Writer
}

func (commitOnStep) OnTrainStart(*callback.State) error { return nil }

func (c commitOnStep) OnStepEnd(*callback.State, callback.StepResult) error {
	if err := c.tx.commit(); err != nil {
		// The new run goes on; the old one is only partly deleted.
		fmt.Fprintf(c.w, "ortrain: warning: %s: removing the replaced run: %v\n", c.tx.rd.Path, err)
	}
	return nil
}

func (commitOnStep) OnValidationEnd(*callback.State, map[string]float64) error { return nil }
func (commitOnStep) OnTrainEnd(*callback.State) error                          { return nil }

// recoverOverwrites puts back the previous run of any directory resume
// names (or, for last and best, of the run's versions) that an overwrite
// cut off by a killed process left aside (rundir.Recover), before the
// checkpoint to resume is looked for.
func recoverOverwrites(w io.Writer, cfg *config.Config, resume string) error {
	var dirs []string
	switch resume {
	case "":
		return nil
	case "last", "best":
		root := filepath.Join(cfg.OutputDir, cfg.Name)
		des, _ := os.ReadDir(root)
		for _, de := range des {
			if de.IsDir() && strings.HasPrefix(de.Name(), "version_") {
				dirs = append(dirs, filepath.Join(root, de.Name()))
			}
		}
	default:
		// A version directory, its checkpoints/ or one checkpoint in it.
		p := filepath.Clean(resume)
		dirs = []string{p, filepath.Dir(p), filepath.Dir(filepath.Dir(p))}
	}
	for _, d := range dirs {
		msg, err := rundir.Recover(d)
		if err != nil {
			return err
		}
		if msg != "" {
			fmt.Fprintln(w, "ortrain: "+msg)
		}
	}
	return nil
}

// joinJob joins the data-parallel job a launcher started this process in
// (nil for a run of one process), after checking that its size is the
// configuration's world size and that every rank has the configuration
// this one has.
func joinJob(cfg *config.Config) (*collective.Comm, error) {
	world := cfg.Trainer.WorldSize()
	size, launched := collective.Launched()
	// strategy = "ddp" with one process still runs the data-parallel
	// path (a one-rank job: its collectives, NCCL's on a GPU), as
	// Lightning's DDP does with devices = 1.
	if world == 1 && (!launched || size == 1) && cfg.Trainer.Strategy != "ddp" {
		return nil, nil
	}
	if !launched {
		return nil, &config.Error{Key: "trainer.devices", Msg: fmt.Sprintf("trainer.devices × trainer.num_nodes = %d processes: start them with mpirun -np %d ortrain train ... (or srun)", world, world)}
	}
	if size != world {
		return nil, &config.Error{Key: "trainer.devices", Msg: fmt.Sprintf("the launcher started %d processes, but trainer.devices × trainer.num_nodes = %d", size, world)}
	}
	timeout, err := collective.TimeoutFromEnv()
	if err != nil {
		return nil, usageError{err}
	}
	comm, err := collective.Init()
	if err != nil {
		return nil, &config.Error{Key: "trainer.devices", Msg: err.Error()}
	}
	// A rank that stops answering would leave the others waiting in
	// their next collective forever: past the timeout, each ends with
	// exit 1, and mpirun ends the job. (The collective cannot be
	// cancelled, nor MPI_Abort called beside it.)
	comm.Watch(timeout, func(err error) {
		fmt.Fprintln(os.Stderr, "ortrain:", err)
		os.Exit(1)
	})
	abortJob = comm.Abort
	finishJob = func() { comm.Finalize() }
	hash, err := cfg.Hash()
	if err != nil {
		return nil, err
	}
	// The same hash on every rank: each 16-bit piece's sum and sum of
	// squares agree with n copies of it only when all are equal.
	var v []float64
	for i := 0; i < 16; i += 4 {
		x, _ := strconv.ParseUint(hash[i:i+4], 16, 16)
		v = append(v, float64(x), float64(x)*float64(x))
	}
	sums := slices.Clone(v)
	if err := comm.SumFloat64(sums); err != nil {
		return nil, err
	}
	n := float64(comm.Size())
	for i := 0; i < len(v); i += 2 {
		if sums[i] != n*v[i] || sums[i+1] != n*v[i+1] {
			// Every rank sees the sums differ (they agree with n
			// copies only when all are equal): all refuse together.
			return nil, trainer.DisagreeError{Err: configDiffers(comm, cfg, hash)}
		}
	}
	return comm, nil
}

// configDiffers says how this rank's configuration differs from rank
// 0's, which rank 0 broadcasts (its length first: a broadcast's size is
// fixed on every rank), naming the keys and both values.
func configDiffers(comm *collective.Comm, cfg *config.Config, hash string) *config.Error {
	generic := &config.Error{Msg: fmt.Sprintf("rank %d's configuration differs from another rank's (config hash %s...): every rank must train the same configuration", comm.Rank(), hash[:12])}
	var text []byte
	if comm.Rank() == 0 {
		text, _ = cfg.Encode()
	}
	size := make([]byte, 8)
	binary.LittleEndian.PutUint64(size, uint64(len(text)))
	if err := comm.Broadcast(size, 0); err != nil {
		return generic
	}
	if comm.Rank() == 0 {
		// The other ranks name the keys.
		generic.Msg = fmt.Sprintf("another rank's configuration differs from rank 0's (config hash %s...), in the keys its message names: every rank must train the same configuration", hash[:12])
	} else {
		text = make([]byte, binary.LittleEndian.Uint64(size))
	}
	if len(text) == 0 || comm.Broadcast(text, 0) != nil || comm.Rank() == 0 {
		return generic
	}
	root, err := config.Parse(text, "rank 0's configuration")
	if err != nil {
		return generic
	}
	diff, err := config.Diff(root, cfg)
	if err != nil {
		return generic
	}
	var keys []string
	for _, k := range diff {
		if strings.HasSuffix(k, "(volatile)") {
			continue // the hash leaves them out (agreeAcrossRanks checks those that must match)
		}
		keys = append(keys, fmt.Sprintf("%s = %v (rank 0: %v)", k, tomlValue(cfg.Value(k)), tomlValue(root.Value(k))))
	}
	if len(keys) == 0 {
		return generic
	}
	return &config.Error{Msg: fmt.Sprintf("rank %d's configuration differs from rank 0's: %s; every rank must train the same configuration", comm.Rank(), strings.Join(keys, ", "))}
}

// tomlValue writes a configuration value as TOML does ("unset" for none).
func tomlValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "unset"
	case string:
		return strconv.Quote(x)
	}
	return fmt.Sprint(v)
}

// abortJob, when a data-parallel job is joined, ends every rank with the
// exit code of a rank that fails, so none waits for it; finishJob leaves
// the job after a clean exit.
var abortJob func(code int)
var finishJob = func() {}

// trainRank is a data-parallel rank other than 0: the same training on
// its shard, with the artifacts in a private temporary directory and
// nothing written for the run (rank 0 writes).
func trainRank(c *cli.Context, cfg *config.Config, comm *collective.Comm, resume string, opts ort.Options) error {
	tmp, err := os.MkdirTemp("", fmt.Sprintf("ortrain-rank%d-", comm.Rank()))
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ck := ""
	if resume != "" {
		if ck, _, err = rundir.FindCheckpoint("--resume", resume, cfg.OutputDir, cfg.Name); err != nil {
			return err
		}
		if err := trainer.CheckResume(cfg, ck); err != nil {
			return err
		}
	}
	var prep prepared
	if err := prep.load(cfg, tmp, opts); err != nil {
		return err
	}
	t, err := trainer.New(trainer.Options{Config: cfg, Artifacts: prep.artifacts, Session: opts, Train: prep.train, Val: prep.val,
		Resume: ck, Comm: comm})
	if err != nil {
		return err
	}
	defer t.Close()
	ctx, stop := interruptible(io.Discard)
	defer stop()
	return t.Run(ctx)
}

// prepared is what a run trains: its artifacts and datasets.
type prepared struct {
	artifacts  string
	train, val data.Dataset
}

func (p *prepared) load(cfg *config.Config, runDir string, session ort.Options) error {
	dir, m, err := setup.Artifacts(cfg, runDir, session)
	if err != nil {
		return err
	}
	// A tensor too large for CUDA's kernels would fail the first step deep
	// inside ONNX Runtime: refused here, before the run starts.
	if err := setup.CheckDeviceSizes(cfg, dir, session.Device); err != nil {
		return err
	}
	p.artifacts = dir
	if p.train, p.val, err = setup.Datasets(cfg, m); err != nil {
		return err
	}
	return setup.CheckData(cfg, m, p.train, p.val)
}

// warnData says what of the data will not train as given: the volumes
// padded to the patch, the examples the token layout cut (a question, plan
// or execution longer than its segment), which would otherwise train on
// padding or shortened text silently.
func warnData(w io.Writer, key string, ds data.Dataset) {
	// Volumes smaller than the patch are padded (as MONAI's SpatialPad
	// does); a volume with one slice padded to a 3-D patch is more likely a
	// mistake than an intent, so it is said.
	if p, ok := ds.(interface{ Padded() []string }); ok && len(p.Padded()) > 0 {
		fmt.Fprintf(w, "ortrain: %s: %d volumes are smaller than data.volumes.patch_size along some axis and are padded with the window's low value, e.g. %s\n",
			key, len(p.Padded()), p.Padded()[0])
	}
	// Files data.skip_bad_files drops when the set opens are not trained
	// on, and data/skipped_samples counts only what the loader drops.
	if sk, ok := ds.(interface {
		Skipped() []error
		Files() []string
	}); ok && len(sk.Skipped()) > 0 {
		for _, e := range sk.Skipped() {
			fmt.Fprintf(w, "ortrain: %s: skipped (data.skip_bad_files): %v\n", key, e)
		}
		fmt.Fprintf(w, "ortrain: %s: skipped %d of %d volume files as bad\n", key, len(sk.Skipped()), len(sk.Skipped())+len(sk.Files()))
	}
	if tk, ok := ds.(*tokens.Dataset); ok && tk.BadRecords > 0 {
		fmt.Fprintf(w, "ortrain: %s: skipped %d records that are not GSM8K examples (data.skip_bad_files); %d remain\n", key, tk.BadRecords, tk.Examples())
	}
	if tr, ok := ds.(interface {
		Truncated() int
		Examples() int
	}); ok && tr.Truncated() > 0 {
		fmt.Fprintf(w, "ortrain: %s: %d of %d examples cut to fit data.tokens.seq_len / segments; raise them to keep whole examples\n",
			key, tr.Truncated(), tr.Examples())
	}
}

// interruptible returns a context cancelled by the first SIGINT or
// SIGTERM, which lets the loop finish its step and checkpoint; a second
// signal exits at once with status 130 (the first delivered twice, as GNU
// timeout does, counts once: see signals).
func interruptible(w io.Writer) (context.Context, func()) {
	s := watchSignals(w)
	s.start()
	return s.ctx, s.stop
}

// configFlags are the flags that choose a run configuration, shared by
// the commands that read one.
func configFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Usage: "run configuration (TOML; training/config/README.md)"},
		&cli.StringFlag{Name: "preset", Usage: "a built-in configuration instead of --config: " + strings.Join(configs.Names(), ", ")},
		&cli.StringSliceFlag{Name: "set", Usage: "override a key: --set trainer.max_steps=10 (repeatable)"},
	}
}

// readConfig reads the configuration --config or --preset names (exactly
// one) and applies the --set overrides; it does not Resolve, so plan can
// tolerate a data path still to be given.
func readConfig(c *cli.Context) (*config.Config, error) {
	path, preset := c.String("config"), c.String("preset")
	var cfg *config.Config
	var err error
	switch {
	case path != "" && preset != "":
		return nil, usageError{errors.New("give --config or --preset, not both")}
	case path != "":
		cfg, err = config.Load(path)
	case preset != "":
		cfg, err = configs.Load(preset)
	default:
		return nil, usageError{errors.New("give --config FILE or --preset NAME (" + strings.Join(configs.Names(), ", ") + ")")}
	}
	if err != nil {
		return nil, err
	}
	return cfg, cfg.Override(c.StringSlice("set")...)
}

// loadConfig reads, overrides and resolves a run configuration file.
func loadConfig(path string, sets []string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if err := cfg.Override(sets...); err != nil {
		return nil, err
	}
	return cfg, cfg.Resolve()
}

// runInputs are the paths a run reads, which --overwrite must not delete.
func runInputs(c *cli.Context, cfg *config.Config) map[string]string {
	return map[string]string{"data.train": cfg.Data.Train, "data.val": cfg.Data.Val, "model.artifacts": cfg.Model.Artifacts,
		"model.onnx": cfg.Model.ONNX, "model.init_weights": cfg.Model.InitWeights, "--config": c.String("config")}
}

// openRunDir opens the run directory and finds the checkpoint to resume
// from ("" for a new run).
func openRunDir(cfg *config.Config, resume, runDir string, overwrite bool, inputs map[string]string) (*rundir.Dir, string, error) {
	if resume == "" {
		if runDir != "" {
			d, err := rundir.At(runDir, overwrite, inputs)
			return d, "", err
		}
		d, err := rundir.New(cfg.OutputDir, cfg.Name)
		return d, "", err
	}
	ck, version, err := rundir.FindCheckpoint("--resume", resume, cfg.OutputDir, cfg.Name)
	if err != nil {
		return nil, "", err
	}
	// A refused resume must not touch the run it refuses.
	if err := trainer.CheckResume(cfg, ck); err != nil {
		return nil, "", err
	}
	d, err := rundir.Resume(version)
	return d, ck, err
}

// syncLaunchesForProfile makes a GPU run's profile time each node's own
// kernels. ONNX Runtime times a node on the host; with asynchronous
// launches that is the time of whichever launch waited for the GPU (an
// H200 profile of a ResNet-50 step put 177 ms in Conv, whose kernels took
// 15.7 ms with synchronous launches). CUDA reads CUDA_LAUNCH_BLOCKING when
// it makes its context, so it is set before the run's first session; a
// value already set is kept.
func syncLaunchesForProfile(w io.Writer, profile string, dev ort.Device) {
	if profile == "" || !dev.CUDA {
		return
	}
	if v, set := os.LookupEnv("CUDA_LAUNCH_BLOCKING"); set {
		fmt.Fprintf(w, "ortrain: profiling on %v with CUDA_LAUNCH_BLOCKING=%s, as set\n", dev, v)
		return
	}
	os.Setenv("CUDA_LAUNCH_BLOCKING", "1")
	fmt.Fprintf(w, "ortrain: profiling on %v with synchronous launches (CUDA_LAUNCH_BLOCKING=1), so that each node's time is its own kernels'; steps are slower while profiled (CUDA_LAUNCH_BLOCKING=0 profiles them asynchronously)\n", dev)
}
