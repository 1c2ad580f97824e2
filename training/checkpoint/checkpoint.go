// Package checkpoint saves and restores training state as directories that
// appear whole or not at all.
//
// A checkpoint is a directory holding tensors.safetensors (weights, optimizer
// moments, buffers: host bytes, nothing tied to a device) and state.json
// (step, epoch, loader cursor, RNG and scheduler state, monitored score,
// config hash). Save writes it under a temporary name beside the
// destination, fsyncs every file and the directory, renames it into place
// and fsyncs the parent, so a crash leaves the old checkpoint or the new one
// and never a half one. Manager keeps the top-k and a "last" link in a
// run's checkpoints directory; Latest finds the newest whole checkpoint.
package checkpoint

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/ortrain/ortrain/training/safefile"
	"github.com/ortrain/ortrain/training/safetensors"
)

// Tensor is one named tensor to save: its bytes come from Data or are
// streamed by Write (see safetensors.Tensor).
type Tensor = safetensors.Tensor

// CorruptError is a damaged checkpoint file, named in the error.
type CorruptError = safetensors.CorruptError

// File names inside a checkpoint directory.
const (
	TensorsFile = "tensors.safetensors"
	StateFile   = "state.json"
)

// FormatVersion is the version of the checkpoint layout written to
// state.json; Load refuses newer ones.
const FormatVersion = 1

// State is the non-tensor part of a checkpoint, stored as state.json.
type State struct {
	Format int   `json:"format"`
	Step   int64 `json:"step"`  // optimizer steps done
	Epoch  int64 `json:"epoch"` // epochs completed
	// Loader is the data loader's cursor, opaque to this package.
	Loader json.RawMessage `json:"loader,omitempty"`
	// RNG is the trainer's random generator state (e.g. a marshalled
	// math/rand/v2 PCG).
	RNG []byte `json:"rng,omitempty"`
	// Scheduler is the LR scheduler's state, opaque to this package.
	Scheduler json.RawMessage `json:"scheduler,omitempty"`
	// LossScaler is float16 training's dynamic loss scale, opaque to this
	// package.
	LossScaler json.RawMessage `json:"loss_scaler,omitempty"`
	// Monitor names the metric that ranks checkpoints; Score is its value at
	// this checkpoint (nil when not measured; Save drops NaN and Inf here and
	// in Metrics, which JSON cannot hold).
	Monitor string   `json:"monitor,omitempty"`
	Score   *float64 `json:"score,omitempty"`
	// Mode is "max" or "min": which way Score ranks.
	Mode string `json:"mode,omitempty"`
	// Metrics are the latest logged values, for people reading the file.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Callbacks holds state of loop callbacks (e.g. early stopping's
	// patience counter) by name.
	Callbacks map[string]json.RawMessage `json:"callbacks,omitempty"`
	// Classes names each label of a class-folder dataset (data.train's
	// folders, sorted), so that eval labels validation folders alike
	// without data.train, and a resume notices folders that changed.
	Classes []string `json:"classes,omitempty"`
	// ConfigHash is config.Config.Hash of the run; Config its resolved TOML.
	ConfigHash string `json:"config_hash,omitempty"`
	Config     string `json:"config,omitempty"`
	// ModelHash is graph.StructureHash of the run's model.onnx when it
	// began (empty for recipes and prebuilt artifacts): the configuration
	// names the file by path only, so a resume compares the graph itself.
	ModelHash string `json:"model_hash,omitempty"`
	// Version is the ortrain version that wrote the checkpoint.
	Version string    `json:"version,omitempty"`
	Time    time.Time `json:"time"`
	// TensorsSHA256 is the hex SHA-256 of tensors.safetensors; Load checks it.
	TensorsSHA256 string `json:"tensors_sha256"`
}

// Checkpoint is a loaded checkpoint: its state and its open tensor file.
type Checkpoint struct {
	Dir     string
	State   State
	Tensors *safetensors.File
}

// Close closes the tensor file.
func (c *Checkpoint) Close() error { return c.Tensors.Close() }

// hooks let tests stop Save between its steps to check what a crash there
// leaves behind; each may be nil.
type hooks struct {
	afterTensors, afterState, beforeRename func()
}

var testHooks hooks

func call(f func()) {
	if f != nil {
		f()
	}
}

// tmpPrefix and trashPrefix mark directories that are not checkpoints: a
// save in progress and a checkpoint being deleted. Latest removes them.
const (
	tmpPrefix   = ".tmp-"
	trashPrefix = ".trash-"
)

// Save writes a checkpoint to dir, which must not exist. st.Time,
// st.Format and st.TensorsSHA256 are filled in. The tensors are streamed:
// each Tensor's Data or Write is read once.
func Save(dir string, st *State, tensors []Tensor) (err error) {
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("checkpoint %s already exists; not overwriting it", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(parent, tmpPrefix+filepath.Base(dir)+"-"+randomSuffix())
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()

	h := sha256.New()
	if err := writeFileSync(filepath.Join(tmp, TensorsFile), func(w io.Writer) error {
		return safetensors.WriteTo(io.MultiWriter(w, h), tensors, map[string]string{"format": "ortrain-checkpoint"})
	}); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	call(testHooks.afterTensors)

	st.Format = FormatVersion
	st.Time = time.Now().UTC()
	dropNonFinite(st)
	st.TensorsSHA256 = hex.EncodeToString(h.Sum(nil))
	js, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(tmp, StateFile), func(w io.Writer) error {
		_, err := w.Write(append(js, '\n'))
		return err
	}); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	call(testHooks.afterState)
	if err := syncDir(tmp); err != nil {
		return err
	}
	call(testHooks.beforeRename)
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return syncDir(parent)
}

// dropNonFinite removes NaN and ±Inf, which JSON cannot hold, from the
// score and metrics: a diverged step must not make the checkpoint fail.
func dropNonFinite(st *State) {
	if st.Score != nil && (math.IsNaN(*st.Score) || math.IsInf(*st.Score, 0)) {
		st.Score = nil
	}
	var clean map[string]float64
	for k, v := range st.Metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if clean == nil {
				clean = maps.Clone(st.Metrics)
			}
			delete(clean, k)
		}
	}
	if clean != nil {
		st.Metrics = clean
	}
}

func writeFileSync(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ReadState reads and checks dir/state.json without opening the tensors.
func ReadState(dir string) (State, error) { return readState(dir) }

// readState reads and checks dir/state.json.
func readState(dir string) (State, error) {
	var st State
	path := filepath.Join(dir, StateFile)
	js, err := safefile.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(js, &st); err != nil {
		return st, &CorruptError{Path: path, Msg: err.Error()}
	}
	if st.Format < 1 || st.Format > FormatVersion {
		return st, &CorruptError{Path: path, Msg: fmt.Sprintf("checkpoint format %d; this ortrain reads up to %d", st.Format, FormatVersion)}
	}
	if st.Step < 0 || st.Epoch < 0 {
		return st, &CorruptError{Path: path, Msg: fmt.Sprintf("step %d, epoch %d: negative", st.Step, st.Epoch)}
	}
	return st, nil
}

// Load opens the checkpoint in dir after checking its state and that the
// tensor file is whole and matches the checksum recorded at save time.
// Errors name the file at fault. The caller closes the checkpoint.
func Load(dir string) (*Checkpoint, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	sf, err := safetensors.Open(filepath.Join(dir, TensorsFile))
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	if err := hashFile(sf.Path(), h); err != nil {
		sf.Close()
		return nil, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != st.TensorsSHA256 {
		sf.Close()
		return nil, &CorruptError{Path: sf.Path(), Msg: fmt.Sprintf("SHA-256 %s does not match %s recorded in %s", got, st.TensorsSHA256, StateFile)}
	}
	return &Checkpoint{Dir: dir, State: st, Tensors: sf}, nil
}

// hashFile feeds the file at path to h.
func hashFile(path string, h io.Writer) error {
	f, err := safefile.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(h, f)
	return err
}
