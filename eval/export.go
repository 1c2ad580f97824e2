package eval

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/safetensors"
)

// ExportOptions say which checkpoint ExportCheckpoint writes, and where.
type ExportOptions struct {
	// Checkpoint is a checkpoint directory, a run's version directory,
	// "last" or "best" (the latter two with Config naming the run).
	Checkpoint string
	Config     *config.Config
	Sets       []string
	// Part is "" for the whole model, or a part its recipe can export on
	// its own (models.Recipe.Parts: the VQ-GAN's encoder and decoder).
	Part string
	// Out is the ONNX file to write; it and Out.data must not exist.
	Out string
}

// ExportResult describes the written file.
type ExportResult struct {
	Checkpoint string
	Step       int64
	Inputs     []string
	Outputs    []string
	// External is the external data file beside Out, "" if none.
	External string
}

// exportExternalAbove is the weight size beyond which the weights go to an
// external data file (ONNX protobufs stop at 2 GiB).
const exportExternalAbove = 1 << 30

// ExportCheckpoint writes a checkpoint's model for inference: the eval
// graph (BatchNorm on its running statistics) without the loss and its
// scalar terms, or a recipe's part, with the checkpoint's weights (their
// moving averages when the run kept them) as initializers, so it runs in any ONNX Runtime with only data fed. The
// file is written atomically, never over an existing one.
func ExportCheckpoint(o ExportOptions) (*ExportResult, error) {
	if o.Out == "" {
		return nil, &InputError{Err: errors.New("give --out FILE, the ONNX file to write")}
	}
	for _, p := range []string{o.Out, o.Out + ".data"} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return nil, &InputError{File: p, Err: errors.New("exists; not overwriting it (remove it or choose another --out)")}
		}
	}
	lc, err := openCheckpoint(o.Checkpoint, o.Config, o.Sets, ort.Options{})
	if err != nil {
		return nil, err
	}
	defer lc.close()
	var g *graph.Graph
	if o.Part == "" {
		if g, err = graph.Load(filepath.Join(lc.dir, lc.m.Files["eval"])); err != nil {
			return nil, err
		}
		// The loss and its terms (scalars) need targets and are training's.
		var outs []string
		for _, out := range g.Outputs {
			if info := g.Info(out); !info.Known || info.Rank() > 0 {
				outs = append(outs, out)
			}
		}
		if len(outs) == 0 {
			return nil, &InputError{File: lc.ck.Dir, Err: errors.New("the model has no output besides its loss to export")}
		}
		g.Outputs = outs
		g.DisableDropout() // eval graphs built before ortrain did this themselves
		g.StandardGelus()  // a file for any runtime, not ONNX Runtime's contrib op
	} else {
		if lc.cfg.Model.Recipe == "" {
			return nil, &InputError{Err: fmt.Errorf("--part %s: parts are a built-in recipe's; this run trains the ONNX model in model.artifacts", o.Part)}
		}
		if g, err = models.Part(lc.cfg.Model.Recipe, o.Part, lc.cfg.Model.Params); err != nil {
			return nil, err
		}
		g.StripStopGradients()
	}
	initial, err := safetensors.Open(filepath.Join(lc.dir, lc.m.Files["weights"]))
	if err != nil {
		return nil, err
	}
	defer initial.Close()
	// Every weight the graph reads becomes an initializer holding the
	// checkpoint's value (frozen ones, which checkpoints do not store, the
	// initial value).
	size := int64(0)
	for _, name := range weightNames(lc.m) {
		isInput := slices.Contains(g.Inputs, name)
		if _, isInit := g.Initializers[name]; !isInput && !isInit {
			continue
		}
		src, stored := lc.ck.Tensors, storedName(lc.ck, name)
		info, ok := src.Info(stored)
		if !ok {
			src, stored = initial, name
			if info, ok = src.Info(name); !ok {
				return nil, &InputError{File: lc.ck.Dir, Err: fmt.Errorf("has no weight %s, and the model's initial weights neither", name)}
			}
		}
		if want := g.Info(name); want.Known && !slices.Equal(want.Shape, info.Shape) {
			return nil, &InputError{File: lc.ck.Dir, Err: fmt.Errorf("weight %s is %v, the exported graph reads %v", name, info.Shape, want.Shape)}
		}
		raw, err := src.Read(stored)
		if err != nil {
			return nil, err
		}
		size += int64(len(raw))
		g.Inputs = slices.DeleteFunc(g.Inputs, func(s string) bool { return s == name })
		g.AddInitializer(graph.Raw(name, info.DType, info.Shape, raw))
	}
	g.Prune()
	read := map[string]bool{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			read[in] = true
		}
	}
	for _, out := range g.Outputs {
		read[out] = true
	}
	g.Inputs = slices.DeleteFunc(g.Inputs, func(s string) bool { return !read[s] })
	res := &ExportResult{Checkpoint: lc.ck.Dir, Step: lc.ck.State.Step, Inputs: g.Inputs, Outputs: g.Outputs}
	var so graph.SaveOptions
	if size > exportExternalAbove {
		so.ExternalThreshold = 1 << 20
		res.External = o.Out + ".data"
	}
	if err := g.Save(o.Out, so); err != nil {
		return nil, fmt.Errorf("export: writing %s: %w", o.Out, err)
	}
	return res, nil
}
