package artifacts

import (
	"slices"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/optim"
)

// PackHost is for host-side runs of the graphs that keep every tensor by
// its own name (tests, reference runs): it adds to state the optimizer's
// flat tensors (Optimizer.Groups) laid out from the per-parameter host
// values there, for the optimizer graph to read. A manifest without groups
// adds nothing.
func (m *Manifest) PackHost(state map[string]*ort.Value) error {
	flat := optim.Pack(m.Optimizer.Groups, func(name string) []byte {
		if v, ok := state[name]; ok {
			return v.RawBytes()
		}
		return nil
	})
	for _, g := range m.Optimizer.Groups {
		for _, f := range g.Flat {
			v, err := ort.NewTensorFromBytes(g.DType, []int64{g.Size}, flat[f.Name])
			if err != nil {
				return err
			}
			if old, ok := state[f.Name]; ok {
				old.Close()
			}
			state[f.Name] = v
		}
	}
	return nil
}

// UnpackHost is PackHost's inverse after the optimizer ran: the flat
// tensors' parts are copied into the per-parameter values they hold, and
// the flat tensors leave state.
func (m *Manifest) UnpackHost(state map[string]*ort.Value) {
	flat := map[string][]byte{}
	for _, g := range m.Optimizer.Groups {
		for _, f := range g.Flat {
			if v, ok := state[f.Name]; ok {
				flat[f.Name] = slices.Clone(v.RawBytes())
				v.Close()
				delete(state, f.Name)
			}
		}
	}
	optim.Unpack(m.Optimizer.Groups, flat, func(name string, b []byte) {
		if v, ok := state[name]; ok {
			copy(v.RawBytes(), b)
		}
	})
}
