// Package export writes a built-in recipe's forward graph as an ONNX file
// with its initial weights as initializers, in the form `ortrain artifacts
// build` reads. A recipe that computes its own loss (VQ-GAN, the diffusion
// LM) exports it as the scalar output "loss", the default of artifacts
// build; one whose loss artifacts.Build adds (the ResNet's label-smoothed
// cross-entropy) exports the logits, and Result.Loss and LabelSmoothing
// say the flags that add it: artifacts build reserves the loss's "target"
// input for itself. It is the route for looking at a
// recipe in Netron, for changing it by hand, or for building its artifacts
// outside a run.
package export

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/loss"
)

// Options say what to export and where.
type Options struct {
	Recipe string
	Params map[string]any
	// Out is the ONNX file to write; it, and its external data file
	// Out.data, must not exist.
	Out string
	// StripMarkers replaces the ortrain.StopGradient markers with plain
	// edges, for viewers and runtimes that do not know the ortrain domain.
	// Without them autodiff would send gradients through the
	// straight-through and codebook paths, so a stripped file is for
	// looking at, not for `ortrain artifacts build`.
	StripMarkers bool
}

// Result describes the written file.
type Result struct {
	Params  int64
	Inputs  []string
	Outputs []string
	// Markers counts the StopGradient markers kept in the file.
	Markers int
	// External is the external data file written beside Out, "" if none.
	External string
	// Loss and LabelSmoothing are `ortrain artifacts build`'s --loss and
	// --label-smoothing for the file: "" and 0 when the file's own "loss"
	// output is the loss.
	Loss           string
	LabelSmoothing float64
}

// Error is an export the user has to change (exit code 2).
type Error struct{ Msg string }

// Error formats the error with the package name.
func (e *Error) Error() string { return "export: " + e.Msg }

// BadInput marks the error as the user's to fix.
func (e *Error) BadInput() bool { return true }

// externalAbove is the model size beyond which the weights go to an
// external data file: ONNX files are protobufs, limited to 2 GiB.
const externalAbove = 1 << 30

// Recipe builds o.Recipe with o.Params and writes it to o.Out.
func Recipe(o Options) (*Result, error) {
	if o.Out == "" {
		return nil, &Error{Msg: "no output file given"}
	}
	for _, p := range []string{o.Out, o.Out + ".data"} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return nil, &Error{Msg: fmt.Sprintf("%s exists; not overwriting it (remove it or choose another --out)", p)}
		}
	}
	m, err := models.Build(o.Recipe, o.Params)
	if err != nil {
		return nil, err
	}
	g := m.Graph
	res := &Result{Params: m.ParamCount}
	if !strings.HasPrefix(m.Loss, loss.Output+":") {
		res.Loss, res.LabelSmoothing = m.Loss, m.LabelSmoothing
	}
	if o.StripMarkers {
		g.StripStopGradients()
	}
	res.Inputs, res.Outputs = g.Inputs, g.Outputs
	for _, n := range g.Nodes {
		if graph.IsStopGradient(n) {
			res.Markers++
		}
	}
	var size int64
	for _, t := range g.Initializers {
		raw, err := graph.RawBytes(t)
		if err != nil {
			return nil, err
		}
		size += int64(len(raw))
	}
	var so graph.SaveOptions
	if size > externalAbove {
		so.ExternalThreshold = 1 << 20
		res.External = o.Out + ".data"
	}
	if err := g.Save(o.Out, so); err != nil {
		return nil, fmt.Errorf("export: writing %s: %w", o.Out, err)
	}
	return res, nil
}
