package trainer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/safetensors"
)

// TestInitWeights: a new run started from model.init_weights — a trained
// run's checkpoint directory, or a safetensors state_dict of its weights —
// begins where the trained run ended (the same first-step loss from both,
// below a fresh run's), not where the model's own initialisation would.
// Strict (the default), a state_dict lacking a parameter is refused naming
// the file and the parameter, and one whose names carry a prefix is
// refused with the prefix named; init_strict = false loads the rest. A
// resume ignores init_weights: the checkpoint's weights win.
func TestInitWeights(t *testing.T) {
	art := mlpArtifacts(t)
	trainedDir, err := run(t, testConfig(t, art, "trainer.max_steps=40"), "", "", &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(trainedDir, "checkpoints", "last")
	ts, _, err := safetensors.Read(filepath.Join(ck, checkpoint.TensorsFile))
	if err != nil {
		t.Fatal(err)
	}
	// The state_dict: the model's tensors only, as PyTorch would save them.
	var weights, prefixed []safetensors.Tensor
	for _, x := range ts {
		if strings.HasPrefix(x.Name, "fc") {
			weights = append(weights, x)
			p := x
			p.Name = "model." + x.Name
			prefixed = append(prefixed, p)
		}
	}
	dir := t.TempDir()
	write := func(name string, ts []safetensors.Tensor) string {
		path := filepath.Join(dir, name)
		if err := safetensors.Write(path, ts, nil); err != nil {
			t.Fatal(err)
		}
		return path
	}
	full, partial, pre := write("full.safetensors", weights), write("partial.safetensors", weights[1:]), write("prefixed.safetensors", prefixed)

	firstLoss := func(set ...string) float64 {
		t.Helper()
		rec := &recorder{}
		if _, err := run(t, testConfig(t, art, append([]string{"trainer.max_steps=4"}, set...)...), "", "", rec); err != nil {
			t.Fatal(err)
		}
		return rec.results[0].Loss
	}
	fresh := firstLoss()
	fromCk := firstLoss(`model.init_weights="` + ck + `"`)
	fromFile := firstLoss(`model.init_weights="` + full + `"`)
	if fromCk != fromFile || !(fromCk < fresh/2) {
		t.Errorf("first-step loss %.4f from the checkpoint, %.4f from its state_dict, %.4f fresh; want equal and below half the fresh", fromCk, fromFile, fresh)
	}
	if loose := firstLoss(`model.init_weights="`+partial+`"`, "model.init_strict=false"); loose == fromFile || loose == fresh {
		t.Errorf("init_strict = false with %s missing: first loss %.4f, want between the fresh %.4f and the full %.4f", weights[0].Name, loose, fresh, fromFile)
	}

	refused := func(path string, want ...string) {
		t.Helper()
		c := testConfig(t, art, `model.init_weights="`+path+`"`)
		opts, _ := c.SessionOptions(false)
		tr, err := New(Options{Config: c, Artifacts: art, Session: opts, Train: newBlobs(96, 1)})
		if err == nil {
			tr.Close()
		}
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Key != "model.init_weights" {
			t.Fatalf("%s: err = %v, want a model.init_weights refusal", path, err)
		}
		for _, w := range append(want, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q does not mention %q", err, w)
			}
		}
	}
	refused(partial, weights[0].Name, "init_strict")
	refused(pre, `prefix "model."`, "--strip-prefix")
	refused(filepath.Join(dir, "absent.safetensors"), "no such file")

	// A resume continues from its checkpoint whatever init_weights says.
	c := testConfig(t, art, "trainer.max_steps=41", `model.init_weights="`+pre+`"`)
	if _, err := run(t, c, trainedDir, ck, &recorder{}); err != nil {
		t.Errorf("resume with init_weights set: %v", err)
	}
}

// TestInitWeightsNonFinite: model.init_weights holding a NaN or an
// infinite weight is refused before the run starts, naming the file and
// the tensor (it was loaded, and every step then skipped).
func TestInitWeightsNonFinite(t *testing.T) {
	art := mlpArtifacts(t)
	ts, _, err := safetensors.Read(filepath.Join(art, artifacts.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		w := slices.Clone(ts)
		i := slices.IndexFunc(w, func(x safetensors.Tensor) bool { return x.DType == dtype.Float32 && len(x.Data) >= 8 })
		w[i].Data = slices.Clone(w[i].Data)
		binary.LittleEndian.PutUint32(w[i].Data[4:], math.Float32bits(bad))
		path := filepath.Join(dir, fmt.Sprintf("%v.safetensors", bad))
		if err := safetensors.Write(path, w, nil); err != nil {
			t.Fatal(err)
		}
		c := testConfig(t, art, `model.init_weights="`+path+`"`)
		opts, _ := c.SessionOptions(false)
		tr, err := New(Options{Config: c, Artifacts: art, Session: opts, Train: newBlobs(96, 1)})
		if err == nil {
			tr.Close()
		}
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Key != "model.init_weights" || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("%q", w[i].Name)) {
			t.Errorf("a %v in %s: %v, want a model.init_weights refusal naming the file and the tensor", bad, w[i].Name, err)
		}
	}
}
