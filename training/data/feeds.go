package data

import (
	"fmt"
	"strings"
)

// Feeds names, by graph input, the batch tensor that feeds it where the
// names differ (data.feeds: a model exported with input "images" fed by
// the image loader's "image"). The trainer and eval both read graph
// inputs through it.
type Feeds map[string]string

// labelNames feed a built-in loss's "target" input when nothing else is
// named for it: what the loaders call labels (class probabilities first,
// which only loaders mixing samples give).
var labelNames = []string{"target", "soft_label", "label", "labels"}

// Source returns the tensor of b that feeds graph input name, and its
// index: the one Feeds names, else the one of the same name, else, for
// "target", a loader's labels.
func (f Feeds) Source(name string, b *Batch) (*Tensor, int, error) {
	names := make([]string, len(b.Tensors))
	for k, t := range b.Tensors {
		names[k] = t.Name
	}
	k, err := f.pick(name, names)
	if err != nil {
		return nil, -1, err
	}
	return b.Tensors[k], k, nil
}

// SourceSpec is Source for a dataset's sample specs: what feeds graph
// input name, before any batch is loaded.
func (f Feeds) SourceSpec(name string, specs []TensorSpec) (TensorSpec, error) {
	names := make([]string, len(specs))
	for k, s := range specs {
		names[k] = s.Name
	}
	k, err := f.pick(name, names)
	if err != nil {
		return TensorSpec{}, err
	}
	return specs[k], nil
}

// pick finds the index among the loader's tensor names of the one feeding
// graph input name.
func (f Feeds) pick(name string, have []string) (int, error) {
	cands := []string{name}
	if src, ok := f[name]; ok {
		cands = []string{src}
	} else if name == "target" {
		cands = labelNames
	}
	for _, c := range cands {
		for k, h := range have {
			if h == c {
				return k, nil
			}
		}
	}
	if src, ok := f[name]; ok {
		return -1, fmt.Errorf("data.feeds: the model's input %q is to be fed by %q, but the data loader gives only %s", name, src, strings.Join(have, ", "))
	}
	return -1, fmt.Errorf("the model takes input %q, but the data loader gives only %s; map them with [data.feeds] %s = \"NAME\"", name, strings.Join(have, ", "), name)
}

// ClassIndices returns the batch's class indices (int64), for accuracy:
// the tensor feeding "target" when it holds indices, else a loader's
// labels; false when the batch has none (class probabilities only).
func (f Feeds) ClassIndices(b *Batch) (*Tensor, bool) {
	if t, _, err := f.Source("target", b); err == nil && t.DType == Int64 {
		return t, true
	}
	for _, name := range labelNames {
		if t := b.Tensor(name); t != nil && t.DType == Int64 {
			return t, true
		}
	}
	return nil, false
}
