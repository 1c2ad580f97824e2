package images

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/ortrain/ortrain/training/data"
)

// SoftLabel is the one-hot (then mixed) label tensor of a Dataset with
// Classes set: the target of a cross-entropy over class probabilities.
const SoftLabel = "soft_label"

// Mixer mixes the samples of a batch as torchvision's reference recipes do
// (transforms.v2 MixUp and CutMix, one of the two chosen per batch with
// equal probability when both are on): with λ ~ Beta(α, α) and each image
// paired with the one before it in the batch (torch.roll by 1), MixUp
// blends the images λ : 1−λ; CutMix pastes the partner's box of side
// √(1−λ) of the image's centred at a uniform point (clipped to the image)
// and sets λ to the share of the image left. The soft labels are mixed λ :
// 1−λ.
type Mixer struct {
	MixUpAlpha, CutMixAlpha float64
	Layout                  Layout
}

// Mix is a data.Config.Mix for a batch of "image" and SoftLabel.
func (m Mixer) Mix(b *data.Batch, rng *rand.Rand) error {
	img, soft := b.Tensor("image"), b.Tensor(SoftLabel)
	if img == nil || soft == nil {
		return fmt.Errorf("images: mixing needs the image and %s tensors", SoftLabel)
	}
	n := len(b.Indices)
	if n < 2 {
		return nil // nothing to mix with
	}
	cutmix := m.CutMixAlpha > 0 && (m.MixUpAlpha == 0 || rng.IntN(2) == 1)
	alpha := m.MixUpAlpha
	if cutmix {
		alpha = m.CutMixAlpha
	}
	if alpha <= 0 {
		return nil
	}
	lam := distuv.Beta{Alpha: alpha, Beta: alpha, Src: rng}.Rand()
	per := len(img.F32) / n
	ps := img.Shape[1:] // [C, H, W] per sample, or [H, W, C]
	C, H, W := ps[0], ps[1], ps[2]
	if m.Layout == NHWC {
		H, W, C = ps[0], ps[1], ps[2]
	}
	// The partner of sample i is i−1 (i = 0 takes the last): a copy of
	// the batch is read while it is overwritten.
	orig := append([]float32(nil), img.F32[:n*per]...)
	origSoft := append([]float32(nil), soft.F32...)
	if !cutmix {
		for i := range n {
			j := (i + n - 1) % n
			a, p := img.F32[i*per:(i+1)*per], orig[j*per:(j+1)*per]
			for k := range a {
				a[k] = float32(lam)*a[k] + float32(1-lam)*p[k]
			}
		}
	} else {
		cx, cy := rng.Float64()*float64(W), rng.Float64()*float64(H)
		r := 0.5 * math.Sqrt(1-lam)
		x1, x2 := clampInt(int(math.Round(cx-r*float64(W))), W), clampInt(int(math.Round(cx+r*float64(W))), W)
		y1, y2 := clampInt(int(math.Round(cy-r*float64(H))), H), clampInt(int(math.Round(cy+r*float64(H))), H)
		for i := range n {
			j := (i + n - 1) % n
			a, p := img.F32[i*per:(i+1)*per], orig[j*per:(j+1)*per]
			for y := y1; y < y2; y++ {
				for x := x1; x < x2; x++ {
					for c := range C {
						k := (c*H+y)*W + x
						if m.Layout == NHWC {
							k = (y*W+x)*C + c
						}
						a[k] = p[k]
					}
				}
			}
		}
		lam = 1 - float64((x2-x1)*(y2-y1))/float64(W*H)
	}
	classes := len(soft.F32) / n
	for i := range n {
		j := (i + n - 1) % n
		for c := range classes {
			soft.F32[i*classes+c] = float32(lam)*origSoft[i*classes+c] + float32(1-lam)*origSoft[j*classes+c]
		}
	}
	return nil
}

func clampInt(v, hi int) int { return min(max(v, 0), hi) }
