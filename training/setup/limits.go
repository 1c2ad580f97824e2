package setup

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/memplan"
)

// SizeCheck is what the tensor-size check found in a training graph at
// the per-device batch: the tensors CUDA's kernels cannot take
// (memplan.CUDAMaxElements) and what to change.
type SizeCheck struct {
	Batch int64           `json:"batch"`
	Limit int64           `json:"limit"`
	Over  []memplan.Large `json:"over,omitempty"`
	// Advice says what to change; empty when nothing is over.
	Advice string `json:"advice,omitempty"`
}

// CheckSizes infers the shapes of the training graph of the artifacts in
// dir at c's per-device batch (nothing is allocated) and lists the tensors
// over memplan.CUDAMaxElements elements, with what to change.
func CheckSizes(c *config.Config, dir string) (*SizeCheck, error) {
	m, err := artifacts.Load(dir)
	if err != nil {
		return nil, err
	}
	g, err := graph.Load(filepath.Join(dir, artifacts.TrainingFile))
	if err != nil {
		return nil, err
	}
	batch := int64(c.Data.BatchSize)
	s := &SizeCheck{Batch: batch, Limit: memplan.CUDAMaxElements}
	if s.Over, err = oversizeAt(g, m, batch); err != nil || len(s.Over) == 0 {
		return s, err
	}
	s.Advice, err = sizeAdvice(c, g, m, s.Over)
	return s, err
}

// oversizeAt lists the training graph's tensors over the limit at batch.
func oversizeAt(g *graph.Graph, m *artifacts.Manifest, batch int64) ([]memplan.Large, error) {
	// The data inputs' leading dimension is the batch, named or not (as
	// artifacts.Memory replays it).
	dims := map[string]int64{"": batch}
	for _, d := range m.Data {
		if len(d.Symbolic) > 0 && d.Symbolic[0] != "" {
			dims[d.Symbolic[0]] = batch
		}
	}
	cg, err := memplan.Concrete(g, dims)
	if err != nil {
		return nil, fmt.Errorf("checking tensor sizes: %v (only the batch dimension may be symbolic)", err)
	}
	return memplan.Oversize(cg, memplan.CUDAMaxElements), nil
}

// sizeAdvice says what brings every tensor under the limit: the largest
// batch dividing data.batch_size that does, with the accumulation that
// keeps the effective batch, or, when one sample is already too much,
// smaller samples.
func sizeAdvice(c *config.Config, g *graph.Graph, m *artifacts.Manifest, over []memplan.Large) (string, error) {
	batch, acc := c.Data.BatchSize, c.Trainer.AccumulateGradBatches
	// Tensors grow linearly with the batch: the divisors that cannot be
	// under the limit by that rule are not tried.
	perSample := (over[0].Elements + int64(batch) - 1) / int64(batch)
	var fix string
	for _, d := range divisors(batch) {
		if d == batch || int64(d)*perSample > memplan.CUDAMaxElements {
			continue
		}
		over, err := oversizeAt(g, m, int64(d))
		if err != nil {
			return "", err
		}
		if len(over) == 0 {
			fix = fmt.Sprintf("data.batch_size = %d with trainer.accumulate_grad_batches = %d keeps the effective batch of %d samples per optimizer step (per device) and brings every tensor under the limit",
				d, acc*batch/d, batch*acc)
			break
		}
	}
	if fix == "" {
		fix = fmt.Sprintf("even one sample makes such a tensor: make the samples smaller (%s) or the model narrower", sizeKey(c))
	}
	if c.Model.Recipe == "bd3lm" {
		// The loss's vocabulary-sized tensors shrink with more pieces.
		if lm, err := models.LMConfig(c.Model.Params); err == nil {
			vocab := func(l memplan.Large) bool { return len(l.Shape) > 0 && l.Shape[len(l.Shape)-1] == int64(lm.Vocab) }
			if slices.ContainsFunc(over, vocab) {
				n := len(lm.PieceSizes())
				fix += fmt.Sprintf("; or split the loss's [positions, vocabulary] tensors further with more model.params.loss_pieces (now %d piece%s)", n, map[bool]string{true: "s"}[n > 1])
			}
		}
	}
	return fix, nil
}

// divisors lists n's divisors, largest first.
func divisors(n int) []int {
	var ds []int
	for d := 1; d*d <= n; d++ {
		if n%d == 0 {
			ds = append(ds, d, n/d)
		}
	}
	slices.Sort(ds)
	slices.Reverse(ds)
	return slices.Compact(ds)
}

// Describe names the tensors over the limit, at most six of them.
func (s *SizeCheck) Describe() string {
	var parts []string
	for i, l := range s.Over {
		if i == 6 {
			parts = append(parts, fmt.Sprintf("and %d more", len(s.Over)-6))
			break
		}
		at := l.Op
		if l.Node != "" {
			at = fmt.Sprintf("node %s (%s)", l.Node, l.Op)
		}
		parts = append(parts, fmt.Sprintf("%s %v = %d elements from %s", l.Name, l.Shape, l.Elements, at))
	}
	return strings.Join(parts, "; ")
}

// Err is the refusal of a run on a CUDA device; nil when nothing is over.
func (s *SizeCheck) Err() error {
	if len(s.Over) == 0 {
		return nil
	}
	return &config.Error{Key: "data.batch_size", Msg: fmt.Sprintf("at %d per device the training graph has %d tensor%s of more than 2^31 − 1 elements, which ONNX Runtime's CUDA kernels cannot take (cuDNN's int-sized descriptors): %s. %s",
		s.Batch, len(s.Over), map[bool]string{true: "s", false: ""}[len(s.Over) > 1], s.Describe(), s.Advice)}
}

// CheckDeviceSizes refuses to train the artifacts in dir on dev when it is
// a CUDA device and a tensor of the training graph at c's per-device batch
// has more elements than its kernels take. The CPU's kernels take int64
// sizes: there it checks nothing.
func CheckDeviceSizes(c *config.Config, dir string, dev ort.Device) error {
	if !dev.CUDA {
		return nil
	}
	s, err := CheckSizes(c, dir)
	if err != nil {
		return err
	}
	return s.Err()
}
