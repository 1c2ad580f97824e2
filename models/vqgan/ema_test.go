package vqgan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models/internal/nn"
	"github.com/ortrain/ortrain/models/internal/steptest"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// TestEMACodebookUpdate runs the EMA codebook's update graph on fixed
// encoder vectors and assignments and compares the three buffers' new
// values with the update written out in Go (TATS's Codebook with the
// restart rows this recipe takes): once with no code restarted (threshold
// 0) and once with the codes assigned fewer than two vectors restarted.
func TestEMACodebookUpdate(t *testing.T) {
	orttest.Init(t)
	const M, e, K, d = 10, 3, 6, 0.9
	r := rand.New(rand.NewPCG(3, 4))
	zf := make([]float32, M*e)
	for i := range zf {
		zf[i] = float32(r.NormFloat64())
	}
	idx := []int64{0, 2, 2, 5, 0, 2, 1, 5, 0, 2} // code 3 and 4 unused, 1 once
	for _, thres := range []float64{0, 0.15} {
		m := &model{Net: nn.New("t", 1), c: Config{EmbedDim: e, CodebookSize: K, CodebookDecay: d, RestartThres: thres}}
		z := m.Input("zf", dtype.Float32, []int64{M, e}, nil)
		ix := m.Input("idx", dtype.Int64, []int64{M}, nil)
		cb := m.Param("quantize.embedding.weight", []int64{K, e}, e, K, nn.Uniform(1))
		cb0, err := graph.FloatData(m.G.Initializers[cb])
		if err != nil {
			t.Fatal(err)
		}
		m.G.Outputs = m.emaCodebook(cb, z, ix)
		if m.B.Err != nil {
			t.Fatal(m.B.Err)
		}
		g := m.G.Clone()
		g.StripStopGradients()
		zv, _ := ort.NewTensor([]int64{M, e}, zf)
		iv, _ := ort.NewTensor([]int64{M}, idx)
		out := steptest.Forward(t, g, map[string]*ort.Value{"zf": zv, "idx": iv})

		// The reference: counts and sums per code, the moving averages
		// from N = 0 and S = the initial codebook, Laplace smoothing, then
		// restarts of codes with N below the threshold.
		n := make([]float64, K)
		s := make([]float64, K*e)
		for i, k := range idx {
			n[k]++
			for j := range e {
				s[int(k)*e+j] += float64(zf[i*e+j])
			}
		}
		size, sum := make([]float64, K), make([]float64, K*e)
		total := 0.0
		for k := range K {
			size[k] = (1 - d) * n[k]
			total += size[k]
			for j := range e {
				sum[k*e+j] = d*cb0[k*e+j] + (1-d)*s[k*e+j]
			}
		}
		check := func(name string, got []float32, want []float64) {
			for i := range want {
				if math.Abs(float64(got[i])-want[i]) > 1e-5*(1+math.Abs(want[i])) {
					t.Errorf("threshold %g: %s[%d] = %g, want %g", thres, name, i, got[i], want[i])
				}
			}
		}
		codes := make([]float64, K*e)
		for k := range K {
			smoothed := (size[k] + 1e-7) / (total + K*1e-7) * total
			for j := range e {
				codes[k*e+j] = sum[k*e+j] / smoothed
				if size[k] < thres {
					codes[k*e+j] = float64(zf[(k*7919%M)*e+j])
				}
			}
		}
		check(ClusterSize, ort.Data[float32](out[ClusterSize+".out"]), size)
		check(EmbedAvg, ort.Data[float32](out[EmbedAvg+".out"]), sum)
		check(cb, ort.Data[float32](out[cb+".out"]), codes)
	}
}
