package images

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/training/data"
)

// mixBatch is a batch of n images [3, 4, 5] whose pixels all hold their
// sample's number (1…n), with one-hot labels of classes i.
func mixBatch(n int) *data.Batch {
	per := 3 * 4 * 5
	img := &data.Tensor{Name: "image", DType: data.Float32, Shape: []int{n, 3, 4, 5}, F32: make([]float32, n*per)}
	soft := &data.Tensor{Name: SoftLabel, DType: data.Float32, Shape: []int{n, n}, F32: make([]float32, n*n)}
	b := &data.Batch{Tensors: []*data.Tensor{img, soft}}
	for i := range n {
		b.Indices = append(b.Indices, i)
		for k := range per {
			img.F32[i*per+k] = float32(i + 1)
		}
		soft.F32[i*n+i] = 1
	}
	return b
}

// TestMixUpAndCutMix: MixUp blends every image with the one before it
// (the first with the last) at one λ, the soft labels at the same λ;
// CutMix pastes one box of the partner into every image and weighs the
// labels by the share of pixels each keeps; both are reproducible from
// the seed, and soft labels stay distributions.
func TestMixUpAndCutMix(t *testing.T) {
	const n = 4
	for _, m := range []Mixer{{MixUpAlpha: 0.2}, {CutMixAlpha: 1.0}} {
		for seed := range uint64(5) {
			b := mixBatch(n)
			if err := m.Mix(b, rand.New(rand.NewPCG(seed, 1))); err != nil {
				t.Fatal(err)
			}
			again := mixBatch(n)
			m.Mix(again, rand.New(rand.NewPCG(seed, 1)))
			img, soft := b.Tensor("image").F32, b.Tensor(SoftLabel).F32
			for k := range img {
				if img[k] != again.Tensor("image").F32[k] {
					t.Fatalf("%+v seed %d: not reproducible", m, seed)
				}
			}
			per := len(img) / n
			for i := range n {
				j := (i + n - 1) % n
				lam := float64(soft[i*n+i])
				sum := 0.0
				for c := range n {
					sum += float64(soft[i*n+c])
				}
				if math.Abs(sum-1) > 1e-6 || math.Abs(float64(soft[i*n+j])-(1-lam)) > 1e-6 {
					t.Errorf("%+v seed %d sample %d: soft label %v, want λ on %d and 1−λ on %d", m, seed, i, soft[i*n:(i+1)*n], i, j)
				}
				own, partner := 0, 0
				for _, v := range img[i*per : (i+1)*per] {
					switch {
					case m.MixUpAlpha > 0:
						want := lam*float64(i+1) + (1-lam)*float64(j+1)
						if math.Abs(float64(v)-want) > 1e-5 {
							t.Fatalf("MixUp sample %d: pixel %g, want %g (λ %g)", i, v, want, lam)
						}
					case v == float32(i+1):
						own++
					case v == float32(j+1):
						partner++
					default:
						t.Fatalf("CutMix sample %d: pixel %g is neither its own nor its partner's", i, v)
					}
				}
				if m.CutMixAlpha > 0 && math.Abs(float64(own)/float64(per)-lam) > 1e-6 {
					t.Errorf("CutMix sample %d: keeps %d of %d pixels, label weight %g", i, own, per, lam)
				}
			}
		}
	}
}
