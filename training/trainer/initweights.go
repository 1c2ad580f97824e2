package trainer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/safetensors"
)

// initWeights starts a new run from model.init_weights: a safetensors
// file keyed as the model's tensors (a PyTorch state_dict) or an ortrain
// checkpoint directory, whose optimizer state and schedule are not taken.
// It returns what it says to the user.
func (e *engine) initWeights(path string, strict bool) (string, error) {
	bad := func(format string, args ...any) error {
		return &config.Error{Key: "model.init_weights", Msg: fmt.Sprintf(format, args...)}
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", bad("%v", err)
	}
	var f *safetensors.File
	fromCheckpoint := st.IsDir()
	if fromCheckpoint {
		ck, err := checkpoint.Load(path)
		if err != nil {
			return "", bad("%s is not an ortrain checkpoint: %v", path, err)
		}
		f = ck.Tensors
	} else if f, err = safetensors.Open(path); err != nil {
		return "", err
	}
	defer f.Close()

	type target struct {
		name string
		v    *ort.Value
	}
	var targets []target
	for _, p := range e.params {
		targets = append(targets, target{p.name, p.v[e.p]})
	}
	for _, b := range e.buffers {
		targets = append(targets, target{b.name, b.v[e.u]})
	}
	for i, fr := range e.m.Frozen {
		targets = append(targets, target{fr.Name, e.frozen[i]})
	}
	var missing, mismatched, loaded []string
	for _, t := range targets {
		info, ok := f.Info(t.name)
		switch {
		case !ok:
			missing = append(missing, t.name)
		case info.DType != t.v.DType() || !slices.Equal(info.Shape, t.v.Shape()):
			mismatched = append(mismatched, fmt.Sprintf("%s (%v%v in the file, %v%v in the model)", t.name, info.DType, info.Shape, t.v.DType(), t.v.Shape()))
		default:
			loaded = append(loaded, t.name)
		}
	}
	if strict && len(missing)+len(mismatched) > 0 || len(loaded) == 0 {
		var why []string
		if len(missing) > 0 {
			why = append(why, fmt.Sprintf("%d of the model's tensors are not in it (%s)%s", len(missing), first(missing), prefixHint(f, missing)))
		}
		if len(mismatched) > 0 {
			why = append(why, fmt.Sprintf("%d differ in type or shape: %s", len(mismatched), first(mismatched)))
		}
		if len(loaded) == 0 {
			why = append(why, "no tensor matches the model by name, type and shape")
		}
		msg := fmt.Sprintf("%s: %s", path, strings.Join(why, "; "))
		if strict && len(loaded) > 0 {
			msg += "; set model.init_strict = false to load what matches and keep the rest as initialised"
		}
		return "", bad("%s", msg)
	}
	// Checked like the data's volumes: a NaN weight would make every
	// step's loss NaN, each step skipped and each checkpoint NaN.
	for _, name := range loaded {
		nan, inf, err := f.NonFinite(name)
		if err != nil {
			return "", err
		}
		if nan+inf > 0 {
			info, _ := f.Info(name)
			return "", bad("%s: tensor %q (%v%v) holds %d NaN and %d infinite values: training from it would skip every step; give weights that are all finite (from a diverged run, an earlier checkpoint)", path, name, info.DType, info.Shape, nan, inf)
		}
	}
	for _, name := range loaded {
		i := slices.IndexFunc(targets, func(t target) bool { return t.name == name })
		if err := e.readInto(f, name, targets[i].v); err != nil {
			return "", err
		}
	}
	msg := fmt.Sprintf("initial weights: %d of %d tensors from %s", len(loaded), len(targets), path)
	if fromCheckpoint {
		msg += " (its weights only: a fresh optimizer and schedule)"
	}
	if rest := append(missing, mismatched...); len(rest) > 0 {
		msg += fmt.Sprintf("; left as initialised: %s", first(rest))
	}
	return msg, nil
}

// first lists up to four names, and how many more there are.
func first(names []string) string {
	if len(names) <= 4 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:4], ", "), len(names)-4)
}

// prefixHint names a prefix the file's names carry where the model's do
// not (a Lightning module's "model."), when stripping it would find the
// first missing tensor.
func prefixHint(f *safetensors.File, missing []string) string {
	for _, t := range f.Tensors() {
		if p, ok := strings.CutSuffix(t.Name, missing[0]); ok && p != "" {
			return fmt.Sprintf("; the file's names carry the prefix %q: write it again with models/pytorch/to_safetensors.py --strip-prefix %s", p, p)
		}
	}
	return ""
}
