package setup

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/data"
)

// Synthetic is a dataset made up to fit a model's data inputs, for smoke
// tests and benchmarks of the loop. Float inputs are standard normal, and
// targets depend on them so the task is learnable: an int64 target of one
// value per sample is 1 where the sample's first float input sums positive
// and 0 elsewhere (a valid class for any classifier), a float target is
// that sum's tanh. An int64 input of several values per sample (token
// ids, per-pixel classes) holds random 0s and 1s rather than a constant.
// Sample i depends on (seed, i) alone. (The diffusion LM's inputs are its
// own noising of token ids; benchmarks give it synthetic GSM8K text.)
type Synthetic struct {
	n    int
	seed uint64
	spec []data.TensorSpec
}

// NewSynthetic makes n samples for the data inputs of m, which must have
// fixed sizes apart from the batch dimension.
func NewSynthetic(m *artifacts.Manifest, n int, seed uint64) (*Synthetic, error) {
	s := &Synthetic{n: n, seed: seed}
	for _, t := range m.Data {
		var dt data.DType
		switch t.DType {
		case "float32":
			dt = data.Float32
		case "int64":
			dt = data.Int64
		case "uint8", "bool":
			dt = data.Uint8
		default:
			return nil, fmt.Errorf("data.kind = \"synthetic\": input %s is %s, which it cannot make", t.Name, t.DType)
		}
		var shape []int
		for i, d := range t.Shape {
			if i == 0 {
				continue // the batch
			}
			if d < 1 {
				return nil, fmt.Errorf("data.kind = \"synthetic\": input %s has shape %v; it needs fixed sizes after the batch", t.Name, t.Shape)
			}
			shape = append(shape, int(d))
		}
		s.spec = append(s.spec, data.TensorSpec{Name: t.Name, DType: dt, Shape: shape})
	}
	return s, nil
}

// Len is the number of samples.
func (s *Synthetic) Len() int { return s.n }

// Spec names the model's data inputs.
func (s *Synthetic) Spec() []data.TensorSpec { return s.spec }

// Load writes sample i.
func (s *Synthetic) Load(i int, _ *rand.Rand, dst data.Sample) error {
	r := rand.New(rand.NewPCG(s.seed, uint64(i)))
	sum, seen := 0.0, false
	for k := range dst {
		if t := &dst[k]; t.DType == data.Float32 && t.Name != "target" {
			for j := range t.F32 {
				t.F32[j] = float32(r.NormFloat64())
				if !seen {
					sum += float64(t.F32[j])
				}
			}
			seen = true
		}
	}
	for k := range dst {
		t := &dst[k]
		switch {
		case t.DType == data.Float32 && t.Name == "target":
			for j := range t.F32 {
				t.F32[j] = float32(math.Tanh(sum))
			}
		case t.DType == data.Int64 && len(t.I64) > 1:
			for j := range t.I64 {
				t.I64[j] = int64(r.Uint64() & 1)
			}
		case t.DType == data.Int64:
			t.I64[0] = 0
			if sum > 0 {
				t.I64[0] = 1
			}
		case t.DType == data.Uint8:
			for j := range t.U8 {
				t.U8[j] = 1
			}
		}
	}
	return nil
}
