package eval

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
)

// Model runs an artifact set's eval graph as a reconstruction model: a batch
// of patches in, the reconstructed patches out. Weights are uploaded to the
// session's device once; a prediction moves only the patches.
type Model struct {
	sess    *ort.Session
	bind    *ort.Binding
	weights []*ort.Value
	input   artifacts.Tensor // the volume input, [N, C, D, H, W]
	target  string           // a data input fed the same patches (autoencoder losses), or ""
	output  string           // the reconstruction
}

// WeightSource hands out the host value of a named parameter, frozen
// parameter or buffer (from a checkpoint or weights.safetensors).
type WeightSource func(name string) (*ort.Value, error)

// OpenModel loads dir's eval graph on the device opts names. The first data
// input is the volume; its first output with the input's rank is the
// reconstruction.
func OpenModel(dir string, weights WeightSource, opts ort.Options) (*Model, error) {
	m, err := artifacts.Load(dir)
	if err != nil {
		return nil, err
	}
	if len(m.Data) == 0 {
		return nil, &InputError{File: dir, Err: errors.New("the eval graph has no data input")}
	}
	in := m.Data[0]
	if len(in.Shape) != 5 {
		return nil, &InputError{File: dir, Err: fmt.Errorf("data input %s has shape %v; sliding-window reconstruction needs [batch, channels, D, H, W]", in.Name, in.Shape)}
	}
	sess, err := ort.NewSession(filepath.Join(dir, m.Files["eval"]), opts)
	if err != nil {
		return nil, err
	}
	model := &Model{sess: sess, input: in}
	for _, o := range sess.Outputs() {
		if o.Name != m.Loss && len(o.Shape) == len(in.Shape) {
			model.output = o.Name
			break
		}
	}
	for _, d := range m.Data[1:] {
		if len(d.Shape) == len(in.Shape) && d.DType == in.DType {
			model.target = d.Name
		}
	}
	if model.output == "" {
		model.Close()
		return nil, &InputError{File: dir, Err: fmt.Errorf("the eval graph has no output shaped like its input %s", in.Name)}
	}
	if model.bind, err = sess.NewBinding(); err != nil {
		model.Close()
		return nil, err
	}
	for _, name := range weightNames(m) {
		host, err := weights(name)
		if err != nil {
			model.Close()
			return nil, err
		}
		dev, err := sess.Upload(host)
		host.Close()
		if err != nil {
			model.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		model.weights = append(model.weights, dev)
		if err := model.bind.BindInput(name, dev); err != nil {
			model.Close()
			return nil, err
		}
	}
	return model, nil
}

// Patch returns the spatial patch size the graph was built for, or zeros
// where it is symbolic.
func (m *Model) Patch() [3]int {
	var p [3]int
	for i := range p {
		p[i] = int(max(m.input.Shape[2+i], 0))
	}
	return p
}

// Predict reconstructs n single-channel patches of the given size laid out
// one after another in batch.
func (m *Model) Predict(batch []float32, n int, patch [3]int) ([]float32, error) {
	shape := []int64{int64(n), 1, int64(patch[0]), int64(patch[1]), int64(patch[2])}
	x, err := ort.NewTensor(shape, batch)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	if err := m.bind.BindInput(m.input.Name, x); err != nil {
		return nil, err
	}
	if m.target != "" {
		if err := m.bind.BindInput(m.target, x); err != nil {
			return nil, err
		}
	}
	if err := m.bind.BindOutputOnHost(m.output); err != nil {
		return nil, err
	}
	if err := m.bind.Run(); err != nil {
		return nil, err
	}
	outs, err := m.bind.Outputs()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, o := range outs {
			o.Close()
		}
	}()
	y := ort.Data[float32](outs[0])
	if len(y) != len(batch) {
		return nil, fmt.Errorf("the model returned %d values for %d inputs: its output %s is not a reconstruction", len(y), len(batch), m.output)
	}
	return append([]float32(nil), y...), nil
}

// Close releases the session and the device weights.
func (m *Model) Close() {
	for _, w := range m.weights {
		w.Close()
	}
	m.bind.Close()
	m.sess.Close()
}
