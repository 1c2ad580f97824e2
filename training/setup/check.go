package setup

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
)

// CheckData checks that the datasets feed the model before anything runs:
// every batch input of the artifacts has a loader tensor (by data.feeds,
// by name, or a loader's labels for "target") of its type and its fixed
// sizes; every data.feeds key names a model input; a classifier sees no
// more classes than it has outputs. Otherwise ONNX Runtime would refuse
// the first step, after the run directory was made, in its own words.
func CheckData(c *config.Config, m *artifacts.Manifest, train, val data.Dataset) error {
	inputs := map[string]bool{}
	for _, d := range m.Data {
		inputs[d.Name] = true
	}
	for _, k := range slices.Sorted(maps.Keys(c.Data.Feeds)) {
		if !inputs[k] {
			var names []string
			for _, d := range m.Data {
				names = append(names, d.Name)
			}
			return &config.Error{Key: "data.feeds." + k, Msg: fmt.Sprintf("the model has no input %q; its batch inputs are %s", k, strings.Join(names, ", "))}
		}
	}
	for _, side := range []struct {
		key string
		ds  data.Dataset
	}{{"data.train", train}, {"data.val", val}} {
		if side.ds == nil {
			continue
		}
		specs := side.ds.Spec()
		for _, d := range m.Data {
			s, err := data.Feeds(c.Data.Feeds).SourceSpec(d.Name, specs)
			if err != nil {
				return &config.Error{Key: "data.feeds", Msg: err.Error()}
			}
			if err := fits(c, d, s, arraysOf(side.key, side.ds)); err != nil {
				return err
			}
		}
		if err := checkClasses(c, m, side.key, side.ds); err != nil {
			return err
		}
	}
	return nil
}

// loaderTypes are the model input types each loader type can feed.
var loaderTypes = map[data.DType][]string{
	data.Float32: {"float32"},
	data.Int64:   {"int64"},
	data.Uint8:   {"uint8", "bool"},
}

// fromFiles is a dataset whose tensors come from files of their own (the
// arrays kind), with the config key that names them.
type fromFiles struct {
	key string
	ds  interface{ File(tensor string) string }
}

// arraysOf is the files of ds where it reads a file per tensor, else nil.
func arraysOf(key string, ds data.Dataset) *fromFiles {
	if f, ok := ds.(interface{ File(tensor string) string }); ok {
		return &fromFiles{key, f}
	}
	return nil
}

// fits checks one loader tensor against the model input it feeds: its
// type, its rank and each size the model fixes (the batch axis against
// data.batch_size). files, when set, names the file of each tensor.
func fits(c *config.Config, d artifacts.Tensor, s data.TensorSpec, files *fromFiles) error {
	what := fmt.Sprintf("the model's input %q", d.Name)
	if files != nil {
		what += fmt.Sprintf(" (fed by %s)", files.ds.File(s.Name))
	} else if s.Name != d.Name {
		what += fmt.Sprintf(" (fed by the loader's %q)", s.Name)
	}
	sizeKey, sizeHint := sizeKey, sizeHint
	if files != nil {
		sizeKey = func(*config.Config) string { return files.key }
		sizeHint = func(*config.Config) string { return "the array's shape after its first axis, the samples" }
	}
	// plan knows some inputs by name only (a large recipe it does not build).
	if d.DType != "" && !slices.Contains(loaderTypes[s.DType], d.DType) {
		return &config.Error{Key: "data.feeds", Msg: fmt.Sprintf("%s is %s, but the loader gives %s", what, d.DType, s.DType)}
	}
	if len(d.Shape) == 0 {
		return nil
	}
	if len(d.Shape) != len(s.Shape)+1 {
		return &config.Error{Key: sizeKey(c), Msg: fmt.Sprintf("%s has %d axes (batch included), but the loader gives %d: per sample %v, a batch %v",
			what, len(d.Shape), len(s.Shape)+1, s.Shape, append([]int{c.Data.BatchSize}, s.Shape...))}
	}
	if b := d.Shape[0]; b > 0 && int(b) != c.Data.BatchSize {
		return &config.Error{Key: "data.batch_size", Msg: fmt.Sprintf("%s was exported with a fixed batch of %d, but data.batch_size is %d: set it to %d, or export with a dynamic batch axis (torch.onnx.export's dynamic_axes)",
			what, b, c.Data.BatchSize, b)}
	}
	for i, want := range d.Shape[1:] {
		if want > 0 && int(want) != s.Shape[i] {
			return &config.Error{Key: sizeKey(c), Msg: fmt.Sprintf("%s takes %v per sample, but the loader gives %v (%s)",
				what, d.Shape[1:], s.Shape, sizeHint(c))}
		}
	}
	return nil
}

// sizeKey is the key that sets the loader's sample sizes.
func sizeKey(c *config.Config) string {
	switch c.Data.Kind {
	case config.KindVolumes:
		return "data.volumes.patch_size"
	case config.KindImages:
		return "data.images.size"
	case config.KindTokens:
		return "data.tokens.seq_len"
	}
	return "data"
}

// sizeHint names the keys that must agree for the kind's sample sizes.
func sizeHint(c *config.Config) string {
	switch c.Data.Kind {
	case config.KindVolumes:
		return fmt.Sprintf("data.volumes.patch_size = %v, [channels, depth, height, width] per sample; a recipe's model.params.patch_size must match it", c.Data.Volumes.PatchSize)
	case config.KindImages:
		return fmt.Sprintf("data.images.size = %d, data.images.layout = %q; a recipe's model.params.image_size and layout must match them", c.Data.Images.Size, c.Data.Images.Layout)
	case config.KindTokens:
		return fmt.Sprintf("data.tokens.seq_len = %d; a recipe's model.params.seq_len must match it", c.Data.Tokens.SeqLen)
	}
	return "the loader's sample shapes"
}

// checkClasses refuses a folder-per-class dataset with more classes than
// the classifier's outputs: labels past the last output would train (or
// fail validation) with no word of the cause.
func checkClasses(c *config.Config, m *artifacts.Manifest, key string, ds data.Dataset) error {
	cl, ok := ds.(interface{ ClassNames() []string })
	if !ok || m.Classes <= 0 {
		return nil
	}
	names := cl.ClassNames()
	if len(names) <= m.Classes {
		return nil
	}
	path := c.Data.Train
	if key == "data.val" {
		path = c.Data.Val
	}
	return &config.Error{Key: key, Msg: fmt.Sprintf("%s has %d class folders, but the model has %d outputs: the classes past %q (%s) have no output; remove those folders or build the model with %d classes",
		abs(path), len(names), m.Classes, names[m.Classes-1], strings.Join(names[m.Classes:min(len(names), m.Classes+5)], ", "), len(names))}
}
