package trainer

import (
	"fmt"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/optim"
)

// accumulator sums the gradients of a step's micro-batches for a training
// graph that writes each micro-batch's gradients alone (artifacts.Manifest
// Reset empty): a later micro-batch's training run writes into scratch
// tensors shaped as the flat gradient tensors, and a graph of one Add per
// flat tensor adds them to the sum. Made at the first step with a second
// micro-batch, so a run that does not accumulate holds no scratch memory.
type accumulator struct {
	scratch []*ort.Value // one per flat gradient tensor, zeros between members
	views   []*ort.Value // per gradient, in manifest order, over scratch
	s       *ort.Session
	train   [2][2]*ort.Binding // [p][u]: the training graph writing into views
	add     [2]*ort.Binding    // [g]: grads at g + scratch → grads at 1-g
}

// newAccumulator allocates the scratch gradients, binds the training graph
// to them for every parity of parameters and buffers (with the data inputs
// the last batch staged), and builds the adding graph.
func (e *engine) newAccumulator() (a *accumulator, err error) {
	a = &accumulator{}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	at := map[string]int{}
	for i, gr := range e.m.Gradients {
		at[optim.GradName(gr.Param)] = i
	}
	a.views = make([]*ort.Value, len(e.m.Gradients))
	g := graph.New("ortrain_accumulate", graph.EmitOpset)
	b := graph.NewBuilder(g, "")
	var flat []flatPair
	for _, grp := range e.m.Optimizer.Groups {
		for _, f := range grp.Flat {
			if f.Prefix != optim.GradName("") {
				continue
			}
			k := len(a.scratch)
			v, err := e.train.Alloc(grp.DType, []int64{grp.Size})
			if err != nil {
				return a, fmt.Errorf("allocating the gradient accumulator's scratch %s[%d]: %w", f.Name, grp.Size, err)
			}
			a.scratch = append(a.scratch, v)
			if err := e.zero(v); err != nil {
				return a, err
			}
			for _, mb := range grp.Members {
				i, ok := at[f.Prefix+mb.Param]
				if !ok {
					return a, fmt.Errorf("flat gradient %s holds %s, which the training graph does not write", f.Name, mb.Param)
				}
				if a.views[i], err = v.View(mb.Offset, mb.Shape); err != nil {
					return a, err
				}
			}
			info := graph.Info{DType: grp.DType, Known: true, Shape: []int64{grp.Size}}
			sum, part := fmt.Sprintf("sum%d", k), fmt.Sprintf("part%d", k)
			g.AddInput(sum, info)
			g.AddInput(part, info)
			b.OpInto(optim.Out(sum), "Add", []string{sum, part})
			g.Outputs = append(g.Outputs, optim.Out(sum))
			for _, fp := range e.flat {
				if fp.name == f.Name {
					flat = append(flat, fp)
				}
			}
		}
	}
	for i, v := range a.views {
		if v == nil {
			return a, fmt.Errorf("gradient of %s lies in no flat gradient tensor: the training graph writes each micro-batch's gradients alone, so ortrain cannot accumulate them", e.m.Gradients[i].Param)
		}
	}
	if b.Err != nil {
		return a, fmt.Errorf("gradient accumulation graph: %w", b.Err)
	}
	model, err := g.Marshal()
	if err != nil {
		return a, err
	}
	opts := e.opts
	opts.CUDA.EnableCUDAGraph = false
	if a.s, err = ort.NewSessionFromBytes(model, opts); err != nil {
		return a, fmt.Errorf("gradient accumulation graph: %w", err)
	}
	for gp := range 2 {
		if a.add[gp], err = a.s.NewBinding(); err != nil {
			return a, err
		}
		var errs []error
		for k, fp := range flat {
			sum := fmt.Sprintf("sum%d", k)
			errs = append(errs, a.add[gp].BindInput(sum, fp.v[gp]), a.add[gp].BindInput(fmt.Sprintf("part%d", k), a.scratch[k]),
				a.add[gp].BindOutput(optim.Out(sum), fp.v[1-gp]))
		}
		if err := firstErr("gradient accumulation graph", errs); err != nil {
			return a, err
		}
	}
	for p := range 2 {
		for u := range 2 {
			bd, err := e.trainBinding(p, u, func(i int) (*ort.Value, *ort.Value) { return nil, a.views[i] })
			if err != nil {
				return a, err
			}
			a.train[p][u] = bd
			if err := e.trainData.bindCurrent(bd); err != nil {
				return a, err
			}
		}
	}
	return a, nil
}

// close releases what the accumulator holds; the training bindings are
// closed with the engine's (allTrain).
func (a *accumulator) close() {
	for _, b := range a.add {
		b.Close()
	}
	for _, v := range a.views {
		v.Close()
	}
	for _, v := range a.scratch {
		v.Close()
	}
	if a.s != nil {
		a.s.Close()
	}
}
