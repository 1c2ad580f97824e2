package optim_test

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/optim"
)

// reference is the optimizer written out in Go, the way PyTorch's AdamW and
// SGD document their updates, for two parameters over several steps.
func reference(c optim.Config, p, g [][]float64, decays []bool, lr, scale, clip float64, steps int) ([][]float64, []float64) {
	c = c.Defaults()
	m := make([][]float64, len(p))
	v := make([][]float64, len(p))
	for i := range p {
		m[i] = make([]float64, len(p[i]))
		v[i] = make([]float64, len(p[i]))
	}
	var norms []float64
	for t := 1; t <= steps; t++ {
		sq := 0.0
		for i := range g {
			for _, x := range g[i] {
				sq += x * scale * x * scale
			}
		}
		norm := math.Sqrt(sq)
		norms = append(norms, norm)
		// A parameter in a clip group (the names are w, b) is clipped by
		// the norm of its group's gradients alone.
		groupOf := func(i int) string {
			for _, prefix := range c.ClipGroups {
				if strings.HasPrefix([]string{"w", "b"}[i], prefix) {
					return prefix
				}
			}
			return ""
		}
		groupSq := map[string]float64{}
		for i := range g {
			for _, x := range g[i] {
				groupSq[groupOf(i)] += x * scale * x * scale
			}
		}
		for i := range p {
			f := scale
			if clip > 0 {
				f *= math.Min(1, clip/(math.Sqrt(groupSq[groupOf(i)])+1e-6))
			}
			wd := 0.0
			if decays[i] {
				wd = c.WeightDecay
			}
			for k := range p[i] {
				gr := g[i][k] * f
				switch c.Kind {
				case optim.AdamW:
					m[i][k] = c.Beta1*m[i][k] + (1-c.Beta1)*gr
					v[i][k] = c.Beta2*v[i][k] + (1-c.Beta2)*gr*gr
					mh := m[i][k] / (1 - math.Pow(c.Beta1, float64(t)))
					vh := v[i][k] / (1 - math.Pow(c.Beta2, float64(t)))
					p[i][k] = p[i][k]*(1-lr*wd) - lr*mh/(math.Sqrt(vh)+c.Eps)
				case optim.SGD:
					d := gr + wd*p[i][k]
					m[i][k] = c.Momentum*m[i][k] + d
					if c.Nesterov {
						d += c.Momentum * m[i][k]
					} else {
						d = m[i][k]
					}
					p[i][k] -= lr * d
				}
			}
		}
	}
	return p, norms
}

// TestOptimizerMatchesReference runs three steps of each optimizer graph on
// ONNX Runtime, feeding its outputs back, and compares parameters and the
// gradient norm with the Go reference (relative 1e-5: float32 rounding).
func TestOptimizerMatchesReference(t *testing.T) {
	cases := []struct {
		name        string
		cfg         optim.Config
		scale, clip float64
	}{
		{"adamw", optim.Config{Kind: optim.AdamW, WeightDecay: 0.1}, 1, 0},
		{"adamw clipped and scaled", optim.Config{Kind: optim.AdamW}, 0.5, 0.3},
		{"sgd momentum", optim.Config{Kind: optim.SGD, WeightDecay: 0.01}, 1, 0},
		{"sgd nesterov clipped", optim.Config{Kind: optim.SGD, Nesterov: true, WeightDecay: 0.01}, 1, 0.5},
		{"adamw with weight ema", optim.Config{Kind: optim.AdamW, EMADecay: 0.9}, 1, 0},
		// b's gradient (norm 0.73) alone passes under the threshold that
		// clips w's (1.3): b must keep its full step. SGD, because Adam's
		// update hardly changes when a step's gradients are all scaled.
		{"sgd clipped in two groups", optim.Config{Kind: optim.SGD, ClipGroups: []string{"b"}}, 1, 0.9},
	}
	orttest.Init(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			params := []optim.Param{
				{Name: "w", Info: graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2, 2}}},
				{Name: "b", Info: graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2}}},
			}
			g, states, groups, err := optim.Build(params, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := g.Marshal()
			s, err := ort.NewSessionFromBytes(m, ort.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p := [][]float64{{0.5, -1, 2, 0.1}, {0.3, -0.2}}
			gr := [][]float64{{0.4, -0.3, 1.2, 0.05}, {-0.7, 0.2}}
			want, norms := reference(c.cfg, [][]float64{append([]float64{}, p[0]...), append([]float64{}, p[1]...)}, gr, []bool{true, false}, 0.05, c.scale, c.clip, 3)

			vals := map[string][]float32{}
			f32 := func(v []float64) []float32 {
				out := make([]float32, len(v))
				for i, x := range v {
					out[i] = float32(x)
				}
				return out
			}
			vals["w"], vals["b"] = f32(p[0]), f32(p[1])
			vals[optim.GradName("w")], vals[optim.GradName("b")] = f32(gr[0]), f32(gr[1])
			shape := map[string][]int64{"w": {2, 2}, "b": {2}}
			for _, st := range states {
				vals[st.Name] = make([]float32, len(vals[st.Param]))
				shape[st.Name] = shape[st.Param]
			}
			shape[optim.GradName("w")], shape[optim.GradName("b")] = shape["w"], shape["b"]
			// The moving average the graph should keep of the weights it
			// returns: a copy at the first step, then d·ema + (1−d)·w.
			wantEMA := map[string][]float64{}
			for step := 1; step <= 3; step++ {
				// The graph reads each group's parameters, gradients and
				// state as flat tensors.
				feed := map[string]*ort.Value{}
				for k, raw := range optim.Pack(groups, func(name string) []byte { return f32bytes(vals[name]) }) {
					feed[k], _ = ort.NewTensorFromBytes(ort.Float32, []int64{int64(len(raw) / 4)}, raw)
				}
				feed[optim.LR], _ = ort.NewScalar[float32](0.05)
				feed[optim.Step], _ = ort.NewScalar(float32(step))
				feed[optim.GradScale], _ = ort.NewScalar(float32(c.scale))
				feed[optim.ClipNorm], _ = ort.NewScalar(float32(c.clip))
				outs, err := s.Run(feed)
				if err != nil {
					t.Fatal(err)
				}
				for i, name := range g.Outputs {
					if name == optim.UpdateFinite {
						if !ort.Data[bool](outs[i])[0] {
							t.Errorf("step %d: update_finite false for finite weights", step)
						}
						outs[i].Close()
						continue
					}
					d := append([]float32{}, ort.Data[float32](outs[i])...)
					switch name {
					case optim.GradNorm:
						if math.Abs(float64(d[0])-norms[step-1]) > 1e-5*norms[step-1] {
							t.Errorf("step %d grad_norm %g, want %g", step, d[0], norms[step-1])
						}
					default:
						optim.Unpack(groups, map[string][]byte{strings.TrimSuffix(name, ".out"): f32bytes(d)}, func(name string, b []byte) {
							vals[name] = append([]float32{}, unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)...)
						})
					}
					outs[i].Close()
				}
				for _, v := range feed {
					v.Close()
				}
				for _, name := range []string{"w", "b"} {
					for k, x := range vals[name] {
						if step == 1 {
							wantEMA[name] = append(wantEMA[name], float64(x))
						} else {
							wantEMA[name][k] = c.cfg.EMADecay*wantEMA[name][k] + (1-c.cfg.EMADecay)*float64(x)
						}
					}
				}
			}
			for _, name := range []string{"w", "b"} {
				got, kept := vals[optim.EMAName(name)]
				if kept != (c.cfg.EMADecay > 0) {
					t.Fatalf("ema_decay %g: average of %s kept %v", c.cfg.EMADecay, name, kept)
				}
				for k, x := range got {
					if math.Abs(float64(x)-wantEMA[name][k]) > 1e-6*(1+math.Abs(wantEMA[name][k])) {
						t.Errorf("%s[%d] = %g after 3 steps, want %g", optim.EMAName(name), k, x, wantEMA[name][k])
					}
				}
			}
			for i, name := range []string{"w", "b"} {
				for k, x := range vals[name] {
					if math.Abs(float64(x)-want[i][k]) > 1e-5*(1+math.Abs(want[i][k])) {
						t.Errorf("%s[%d] = %g after 3 steps, want %g", name, k, x, want[i][k])
					}
				}
			}
		})
	}
}

func f32bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// TestDecayScope: by default a bias (rank 1) is exempt from weight decay
// and a weight (rank 2) is not; an empty NoDecay (optimizer.
// decay_bias_and_norm) decays both; the choice survives the manifest's
// JSON (nil and empty stay apart).
func TestDecayScope(t *testing.T) {
	bias := optim.Param{Name: "fc.bias", Info: graph.Info{DType: ort.Float32, Known: true, Shape: []int64{3}}}
	weight := optim.Param{Name: "fc.weight", Info: graph.Info{DType: ort.Float32, Known: true, Shape: []int64{3, 4}}}
	def := optim.Config{Kind: optim.SGD}
	all := optim.Config{Kind: optim.SGD, NoDecay: []string{}}
	if def.Decays(bias) || !def.Decays(weight) || !all.Decays(bias) || !all.Decays(weight) {
		t.Errorf("default: bias %v weight %v; all: bias %v weight %v", def.Decays(bias), def.Decays(weight), all.Decays(bias), all.Decays(weight))
	}
	for _, c := range []optim.Config{def, all} {
		b, _ := json.Marshal(c)
		var back optim.Config
		if err := json.Unmarshal(b, &back); err != nil || (back.NoDecay == nil) != (c.NoDecay == nil) {
			t.Errorf("%s: NoDecay %v after JSON, want %v", b, back.NoDecay, c.NoDecay)
		}
	}
}

// TestLayout: parameters group by type, decay and clipping group, in the
// order they come; members start at 256-byte boundaries; Pack puts each
// tensor at its offset with zeros between, and Unpack returns it.
func TestLayout(t *testing.T) {
	info := func(dt ort.DType, shape ...int64) graph.Info { return graph.Info{DType: dt, Known: true, Shape: shape} }
	params := []optim.Param{
		{Name: "a.weight", Info: info(ort.Float32, 3, 2)},
		{Name: "a.bias", Info: info(ort.Float32, 3)},
		{Name: "b.weight", Info: info(ort.Float32, 7, 10)},
		{Name: "h.weight", Info: info(ort.BFloat16, 5, 5)},
		{Name: "d.weight", Info: info(ort.Float32, 2, 2)},
	}
	c := optim.Config{Kind: optim.SGD, ClipGroups: []string{"d."}}
	_, states, groups, err := optim.Build(params, c)
	if err != nil {
		t.Fatal(err)
	}
	type place struct {
		group  int
		offset int64
	}
	want := map[string]place{"a.weight": {0, 0}, "b.weight": {0, 64}, "a.bias": {1, 0}, "h.weight": {2, 0}, "d.weight": {3, 0}}
	for gi, g := range groups {
		for _, m := range g.Members {
			if w := want[m.Param]; w != (place{gi, m.Offset}) {
				t.Errorf("%s in group %d at %d, want group %d at %d", m.Param, gi, m.Offset, w.group, w.offset)
			}
		}
	}
	if len(groups) != 4 || groups[0].Size != 64+128 || groups[2].Size != 128 || groups[2].DType != ort.BFloat16 {
		t.Fatalf("groups %+v", groups)
	}
	if len(states) != len(params) {
		t.Errorf("%d momentum states for %d parameters", len(states), len(params))
	}
	vals := map[string][]float32{"a.weight": {1, 2, 3, 4, 5, 6}, "b.weight": make([]float32, 70)}
	for i := range vals["b.weight"] {
		vals["b.weight"][i] = float32(i + 10)
	}
	flat := optim.Pack(groups[:1], func(name string) []byte { return f32bytes(vals[name]) })
	got := unsafe.Slice((*float32)(unsafe.Pointer(&flat["flat0.params"][0])), groups[0].Size)
	if got[5] != 6 || got[6] != 0 || got[63] != 0 || got[64] != 10 || got[133] != 79 || got[134] != 0 {
		t.Errorf("packed %v", got)
	}
	back := map[string][]float32{}
	optim.Unpack(groups[:1], flat, func(name string, b []byte) {
		back[name] = append([]float32{}, unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)...)
	})
	if !slices.Equal(back["a.weight"], vals["a.weight"]) || !slices.Equal(back["b.weight"], vals["b.weight"]) || len(back["grad.a.weight"]) != 6 {
		t.Errorf("unpacked %v", back)
	}
}

// TestLayoutBoundsGroups: a group closes before it would pass 16M
// elements (its update's temporaries are a group long); a parameter longer
// than that has a group of its own.
func TestLayoutBoundsGroups(t *testing.T) {
	info := func(n int64) graph.Info { return graph.Info{DType: ort.Float32, Known: true, Shape: []int64{n, 2}} }
	params := []optim.Param{
		{Name: "a", Info: info(1 << 22)}, // 8M elements
		{Name: "b", Info: info(1 << 22)}, // 16M in all: fits
		{Name: "c", Info: info(1)},       // would pass 16M: a new group
		{Name: "d", Info: info(1 << 24)}, // 32M alone
		{Name: "e", Info: info(1)},
	}
	var got [][]string
	for _, g := range (optim.Config{Kind: optim.SGD}).Layout(params) {
		var names []string
		for _, m := range g.Members {
			names = append(names, m.Param)
		}
		got = append(got, names)
	}
	want := [][]string{{"a", "b"}, {"c"}, {"d"}, {"e"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("groups %v, want %v", got, want)
	}
}
