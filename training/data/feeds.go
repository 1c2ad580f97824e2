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
	cands := []string{name}
	if src, ok := f[name]; ok {
		cands = []string{src}
	} else if name == "target" {
		cands = labelNames
	}
	for _, c := range cands {
		for k, t := range b.Tensors {
			if t.Name == c {
				return t, k, nil
			}
		}
	}
	var have []string
	for _, t := range b.Tensors {
		have = append(have, t.Name)
	}
	if src, ok := f[name]; ok {
		return nil, -1, fmt.Errorf("data.feeds: the model's input %q is to be fed by %q, but the data loader gives only %s", name, src, strings.Join(have, ", "))
	}
	return nil, -1, fmt.Errorf("the model takes input %q, but the data loader gives only %s; map them with [data.feeds] %s = \"NAME\"", name, strings.Join(have, ", "), name)
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
