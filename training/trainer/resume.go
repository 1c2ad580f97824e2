package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/graph"
)

// classChanges says how the class folders now differ from those a
// checkpoint trained on: the folders new and missing, or, with the same
// folders, that their order changed.
func classChanges(was, now []string) string {
	var added, missing []string
	for _, c := range now {
		if !slices.Contains(was, c) {
			added = append(added, c)
		}
	}
	for _, c := range was {
		if !slices.Contains(now, c) {
			missing = append(missing, c)
		}
	}
	var parts []string
	if len(added) > 0 {
		parts = append(parts, "new "+abbreviate(added))
	}
	if len(missing) > 0 {
		parts = append(parts, "missing "+abbreviate(missing))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("the same folders in another order (%s, was %s)", abbreviate(now), abbreviate(was))
	}
	return strings.Join(parts, "; ")
}

// abbreviate lists the first few names and how many more.
func abbreviate(names []string) string {
	if len(names) <= 6 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, ... %d more", strings.Join(names[:6], ", "), len(names)-6)
}

// restore continues from the checkpoint in dir: tensors back onto the
// device, step, epoch, loader position and schedule; it returns the
// callbacks' state, for them to restore once made.
func (t *Trainer) restore(dir string, log io.Writer) (map[string]json.RawMessage, error) {
	ck, err := checkpoint.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("resume from %s: %w", dir, err)
	}
	defer ck.Close()
	st := ck.State
	added, err := resumable(t.cfg, dir, st.ConfigHash, st.Config)
	if err != nil {
		return nil, err
	}
	if err := sameModel(t.cfg, dir, st.ModelHash); err != nil {
		return nil, err
	}
	t.modelHash = st.ModelHash
	// A class folder added or renamed since shifts the labels after it:
	// the weights would go on learning the old classes under new numbers.
	if len(st.Classes) > 0 && t.classes != nil && !slices.Equal(st.Classes, t.classes) {
		return nil, &config.Error{Key: "data.train", Msg: fmt.Sprintf("%s's class folders (%d) are not those the checkpoint %s trained on (%d): %s; labels would change meaning; restore the folders, or start a new run (model.init_weights = the checkpoint)",
			t.cfg.Data.Train, len(t.classes), dir, len(st.Classes), classChanges(st.Classes, t.classes))}
	}
	fresh, err := t.eng.restore(ck.Tensors, added)
	if err != nil {
		return nil, fmt.Errorf("resume from %s: %w", dir, err)
	}
	if len(added) > 0 && log != nil {
		fmt.Fprintf(log, "ortrain: resuming step %d with modules the checkpoint has not (%s): %d parameters start from their initial values, their optimizer state from zero; the rest continues\n",
			st.Step, strings.Join(added, ", "), fresh)
	}
	var ss schedState
	if err := json.Unmarshal(st.Scheduler, &ss); err != nil {
		return nil, &checkpoint.CorruptError{Path: filepath.Join(dir, checkpoint.StateFile), Msg: "scheduler: " + err.Error()}
	}
	if err := json.Unmarshal(st.Loader, &t.cursor); err != nil {
		return nil, &checkpoint.CorruptError{Path: filepath.Join(dir, checkpoint.StateFile), Msg: "loader: " + err.Error()}
	}
	if err := t.rescaleCursor(dir, st.Config); err != nil {
		return nil, err
	}
	if err := t.train.Resume(t.cursor); err != nil {
		return nil, err
	}
	if t.scaler != nil {
		if err := json.Unmarshal(st.LossScaler, t.scaler); err != nil {
			return nil, &checkpoint.CorruptError{Path: filepath.Join(dir, checkpoint.StateFile), Msg: "loss_scaler: " + err.Error()}
		}
	}
	t.sched, t.updates = ss.Schedule, ss.Updates
	t.state.Step, t.state.Epoch = st.Step, int64(t.cursor.Epoch)
	// The schedule continues as the checkpoint planned it (a resume is
	// the same run); a longer run is said to train past its end.
	if sc := t.sched; sc.Name != "constant" && sc.TotalSteps > 0 && t.state.MaxSteps > sc.TotalSteps && log != nil {
		fmt.Fprintf(log, "ortrain: the learning-rate schedule continues as the run began it, %s over %d steps: steps %d to %d train at its final LR, %g; to decay over the longer run, start a new run from this checkpoint's weights (model.init_weights)\n",
			sc.Name, sc.TotalSteps, max(sc.TotalSteps, st.Step)+1, t.state.MaxSteps, sc.LR(sc.TotalSteps))
	}
	return st.Callbacks, nil
}

// rescaleCursor converts the loader position saved by a run that split
// its steps into other per-device batches or another number of devices
// (the same samples per step: the configuration check saw to it): the
// position counts one rank's batches, so it scales by batch × devices.
func (t *Trainer) rescaleCursor(dir, saved string) error {
	old, err := config.Parse([]byte(saved), filepath.Join(dir, checkpoint.StateFile))
	if err != nil {
		return nil // the configuration check parsed it already
	}
	was := old.Data.BatchSize * old.Trainer.WorldSize()
	now := t.cfg.Data.BatchSize * t.cfg.Trainer.WorldSize()
	if was == now {
		return nil
	}
	samples := t.cursor.Position * was
	if samples%now != 0 {
		return &config.Error{Source: dir, Key: "resume", Msg: fmt.Sprintf("the checkpoint stopped %d samples into its epoch, which %d-sample rounds (data.batch_size × devices) do not divide", samples, now)}
	}
	t.cursor.Position = samples / now
	return nil
}

// configChanged explains why a checkpoint cannot be resumed with this
// configuration, naming the keys that differ.
// CheckResume refuses, before anything is written, a resume from the
// checkpoint in dir under a configuration that changes the computation.
func CheckResume(c *config.Config, dir string) error {
	st, err := checkpoint.ReadState(dir)
	if err != nil {
		return fmt.Errorf("resume from %s: %w", dir, err)
	}
	if m := c.Trainer.MaxSteps; m > 0 && st.Step >= m {
		return &config.Error{Key: "trainer.max_steps", Msg: fmt.Sprintf("%d: the checkpoint %s is at step %d already, so nothing would train; raise trainer.max_steps to continue", m, dir, st.Step)}
	}
	if _, err = resumable(c, dir, st.ConfigHash, st.Config); err != nil {
		return err
	}
	return sameModel(c, dir, st.ModelHash)
}

// sameModel refuses a resume whose model.onnx is now another graph than
// the one the checkpoint in dir recorded (hash, graph.StructureHash). The
// configuration's hash leaves paths out, and a resume trains the run's
// own artifacts: a changed file would be silently ignored. A model.onnx
// that is gone is no change (a resume needs only the run directory), nor
// is a checkpoint that recorded no hash (older ones, recipes).
func sameModel(c *config.Config, dir, hash string) error {
	path := c.Model.ONNX
	if hash == "" || path == "" {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	now, err := graph.StructureHash(path)
	if err != nil {
		return &config.Error{Key: "model.onnx", Msg: fmt.Sprintf("the checkpoint %s trained another graph than %s, which cannot be read as one (%v); restore the model file the run began with, or leave model.onnx out: a resume trains the run's own artifacts", dir, path, err)}
	}
	if now != hash {
		return &config.Error{Key: "model.onnx", Msg: fmt.Sprintf("%s has changed since the checkpoint %s: its graph (ops, inputs, weight names) hashes to %.12s, the run's to %.12s, and a resume would go on training the run's own artifacts, not this graph; restore the file the run began with, or start a new run from the checkpoint's weights (model.init_weights = %q)", path, dir, now, hash, dir)}
	}
	return nil
}

// resumable checks a checkpoint's configuration (hash and TOML, as its
// state records them) against c: the same computation, or c only adds
// modules the recipe can initialise afresh, whose name prefixes it
// returns (models.Added: discriminators turned on after an L1 stage).
func resumable(c *config.Config, dir, hash, saved string) (added []string, err error) {
	now, err := c.Hash()
	if err != nil {
		return nil, err
	}
	if hash == now {
		return nil, nil
	}
	old, err := config.Parse([]byte(saved), filepath.Join(dir, checkpoint.StateFile))
	if err == nil {
		// The saved configuration hashed as this version hashes (a
		// checkpoint from before a change in what the hash covers).
		if h, herr := old.Hash(); herr == nil && h == now {
			return nil, nil
		}
	}
	if err == nil && c.Model.Recipe != "" && old.Model.Recipe == c.Model.Recipe {
		if diff, err := config.Diff(old, c); err == nil && !slices.ContainsFunc(diff, func(k string) bool {
			return !strings.HasPrefix(k, "model.params.") && !strings.HasSuffix(k, "(volatile)")
		}) {
			if added, ok := models.Added(c.Model.Recipe, old.Model.Params, c.Model.Params); ok {
				return added, nil
			}
		}
	}
	return nil, configChanged(dir, saved, c)
}

func configChanged(dir, saved string, now *config.Config) error {
	fresh := fmt.Sprintf("or start a new run from this checkpoint's weights (model.init_weights = %q: a fresh optimizer and schedule)", dir)
	msg := "the configuration changes the computation since the checkpoint; restore the configuration it trained with, " + fresh
	old, err := config.Parse([]byte(saved), filepath.Join(dir, checkpoint.StateFile))
	if err != nil {
		return &config.Error{Source: dir, Key: "resume", Msg: msg}
	}
	diff, err := config.Diff(old, now)
	if err != nil {
		return &config.Error{Source: dir, Key: "resume", Msg: msg}
	}
	// Only what the hash covers needs restoring: run length, cadence,
	// paths and [runtime] ("(volatile)") may change on a resume, and how
	// a step's samples split into devices, batches and accumulation may,
	// while their number stays.
	split := []string{"data.batch_size", "trainer.accumulate_grad_batches", "trainer.devices", "trainer.num_nodes"}
	var keys, why []string
	for _, k := range diff {
		if !strings.HasSuffix(k, "(volatile)") && !slices.Contains(split, k) {
			keys = append(keys, k)
		}
	}
	was, is := old.EffectiveBatchSize(old.Trainer.WorldSize()), now.EffectiveBatchSize(now.Trainer.WorldSize())
	if was != is {
		why = append(why, fmt.Sprintf("the samples per optimizer step change from %d (%s) to %d (%s): keep devices × num_nodes × data.batch_size × accumulate_grad_batches at %d",
			was, stepSplit(old), is, stepSplit(now), was))
	}
	if len(keys) > 0 {
		why = append(why, "restore "+strings.Join(keys, ", "))
	}
	if len(why) == 0 {
		return &config.Error{Source: dir, Key: "resume", Msg: msg}
	}
	return &config.Error{Source: dir, Key: "resume", Msg: "the configuration changes the computation since the checkpoint: " + strings.Join(why, "; ") + "; " + fresh}
}

// stepSplit says how a step's samples split: "2 ranks × 2" or, with
// accumulation, "1 rank × 2 × 3 accumulated".
func stepSplit(c *config.Config) string {
	w := c.Trainer.WorldSize()
	s := fmt.Sprintf("%d rank%s × %d", w, map[bool]string{true: "s"}[w != 1], c.Data.BatchSize)
	if a := c.Trainer.AccumulateGradBatches; a > 1 {
		s += fmt.Sprintf(" × %d accumulated", a)
	}
	return s
}
