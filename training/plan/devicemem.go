package plan

import (
	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
)

// deviceTyped rewrites a training graph built where the low-precision
// products were emulated (a CPU) as a GPU with their kernels runs it,
// for the memory replay: the values the device holds in the low type
// (lowTyping) take its size, and the Casts it would not run (rounding
// pairs, float32 copies no float32 op reads) are gone, their readers
// reading the Cast's input. A float32 copy that a float32 op reads (a
// BatchNorm's input) stays float32: the device holds it beside the low
// value.
func deviceTyped(low dtype.DType, data map[string]bool) func(c *graph.Graph) {
	return func(c *graph.Graph) {
		lowVal, elide := lowTyping(c, data, low)
		for _, n := range c.Nodes {
			if n.Op == "Cast" && !elide[n] && dtype.DType(n.Int("to", 0)) == dtype.Float32 {
				lowVal[n.Outputs[0]] = false
			}
		}
		outputs := map[string]bool{}
		for _, o := range c.Outputs {
			outputs[o] = true
		}
		alias := map[string]string{}
		kept := c.Nodes[:0]
		for _, n := range c.Nodes {
			for i, in := range n.Inputs {
				if a, ok := alias[in]; ok {
					n.Inputs[i] = a
				}
			}
			if elide[n] && !outputs[n.Outputs[0]] {
				alias[n.Outputs[0]] = n.Inputs[0]
				continue
			}
			kept = append(kept, n)
		}
		c.Nodes = kept
		for v, isLow := range lowVal {
			if info := c.Info(v); isLow && info.Float() {
				info.DType = low
				c.Infos[v] = info
			}
		}
	}
}

// deviceTypedPeak replays the step of the artifacts in dir at batch as a
// GPU with m's low-precision kernels types it (deviceTyped); 0 for
// artifacts without mixed precision.
func deviceTypedPeak(dir string, m *artifacts.Manifest, batch int64, shared bool) (int64, error) {
	low := lowType(m)
	if low == 0 {
		return 0, nil
	}
	data := map[string]bool{}
	for _, d := range m.Data {
		data[d.Name] = true
	}
	r, err := artifacts.MemoryAs(dir, batch, deviceTyped(low, data))
	if err != nil {
		return 0, err
	}
	return r.StepPeak(shared), nil
}

// lowType is the artifacts' low-precision compute type, 0 for float32.
func lowType(m *artifacts.Manifest) dtype.DType {
	if d, err := dtype.ParseDType(m.Precision.Compute); err == nil && (d == dtype.Float16 || d == dtype.BFloat16) {
		return d
	}
	return 0
}
