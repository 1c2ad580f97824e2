package images

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// AutoAugment picks an automatic augmentation policy for training images,
// applied as torchvision's reference recipes place it: after the random
// crop and flip, on the uint8 pixels, before normalisation and
// RandomErasing. Ops and magnitudes are torchvision's (transforms'
// TrivialAugmentWide and RandAugment with their defaults: 31 magnitude
// bins, nearest interpolation, fill 0), computed as its functional ops on
// uint8 tensors compute them.
type AutoAugment int

// The policies.
const (
	NoAutoAugment AutoAugment = iota
	// TrivialAugmentWide applies one op drawn uniformly, at a magnitude
	// drawn uniformly from its 31 bins.
	TrivialAugmentWide
	// RandAugment applies RandAugmentN ops drawn uniformly (with
	// replacement), each at bin RandAugmentM of 31.
	RandAugment
)

// AutoAugments names the policies as data.images.auto_augment does.
var AutoAugments = map[string]AutoAugment{"": NoAutoAugment, "trivialaugment": TrivialAugmentWide, "randaugment": RandAugment}

// MagnitudeBins is the number of magnitude steps of both policies: bins
// 0–30, 0 the weakest.
const MagnitudeBins = 31

// Op is one augmentation, numbered in torchvision's order of the
// augmentation space, which both policies draw from uniformly.
type Op int

// The ops of TrivialAugmentWide and RandAugment.
const (
	Identity Op = iota
	ShearX
	ShearY
	TranslateX
	TranslateY
	Rotate
	Brightness
	Color
	Contrast
	Sharpness
	Posterize
	Solarize
	AutoContrast
	Equalize
	numOps
)

var opNames = [numOps]string{"Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
	"Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"}

func (o Op) String() string {
	if o >= 0 && o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// signed ops take their magnitude with a random sign.
func (o Op) signed() bool { return o >= ShearX && o <= Sharpness }

// Magnitude is op's magnitude at bin (0–30) under policy p for an image of
// h × w pixels (RandAugment's translation scales with the size), before
// any sign flip. Ops without a magnitude give 0.
func Magnitude(p AutoAugment, o Op, bin, h, w int) float64 {
	wide := p == TrivialAugmentWide
	pick := func(trivial, rand float64) float64 {
		if wide {
			return trivial
		}
		return rand
	}
	switch o {
	case ShearX, ShearY:
		return linspace32(0, pick(0.99, 0.3), bin)
	case TranslateX:
		return linspace32(0, pick(32, 150.0/331.0*float64(w)), bin)
	case TranslateY:
		return linspace32(0, pick(32, 150.0/331.0*float64(h)), bin)
	case Rotate:
		return linspace32(0, pick(135, 30), bin)
	case Brightness, Color, Contrast, Sharpness:
		return linspace32(0, pick(0.99, 0.9), bin)
	case Posterize:
		// 8 bits at bin 0 down to 2 (TrivialAugmentWide) or 4
		// (RandAugment) at bin 30, rounded half to even in float32.
		step := float32(pick(30.0/6, 30.0/4))
		return float64(8 - int(math.RoundToEven(float64(float32(bin)/step))))
	case Solarize:
		return linspace32(255, 0, bin)
	}
	return 0
}

// linspace32 is element i of torch.linspace(start, end, 31) in float32:
// the first half counted up from start, the second down from end.
func linspace32(start, end float64, i int) float64 {
	s, e := float32(start), float32(end)
	step := (e - s) / float32(MagnitudeBins-1)
	if i < MagnitudeBins/2 {
		return float64(s + float32(step*float32(i)))
	}
	return float64(e - float32(step*float32(MagnitudeBins-1-i)))
}

// Planes is an image of 3 uint8 channel planes of H × W, as a CHW uint8
// tensor: channel c's row y starts at Pix[(c*H+y)*W].
type Planes struct {
	Pix  []uint8
	H, W int
}

// augmenter holds the policy and the buffers of one sample's augmentation.
type augmenter struct {
	policy AutoAugment
	n, m   int // RandAugment's count and bin
}

// draw applies the policy to img, drawing from rng as torchvision draws:
// the op uniformly, the magnitude bin (TrivialAugmentWide only), then a
// sign for the signed ops. tmp is scratch of img's size.
func (a augmenter) draw(img Planes, tmp []uint8, rng *rand.Rand) {
	ops := 1
	if a.policy == RandAugment {
		ops = a.n
	}
	for range ops {
		o := Op(rng.IntN(int(numOps)))
		bin := a.m
		if a.policy == TrivialAugmentWide && o != Identity && o != AutoContrast && o != Equalize {
			bin = rng.IntN(MagnitudeBins)
		}
		mag := Magnitude(a.policy, o, bin, img.H, img.W)
		if o.signed() && rng.IntN(2) == 1 {
			mag = -mag
		}
		Apply(img, o, mag, tmp)
	}
}

// Apply runs op o at magnitude mag on img in place, as torchvision's
// autoaugment _apply_op does on a uint8 tensor: shears with the top-left
// corner fixed and the magnitude the shear's tangent, translations by
// whole pixels (truncated), rotation in degrees counter-clockwise about the
// centre, nearest sampling with 0 outside; Brightness, Color, Contrast and
// Sharpness blend with black, the grey image, its mean grey and a blurred
// image by a factor 1+mag; Posterize keeps mag bits, Solarize inverts
// pixels ≥ mag. tmp, of img's size or nil, is scratch for the geometric
// ops.
func Apply(img Planes, o Op, mag float64, tmp []uint8) {
	switch o {
	case ShearX:
		geometric(img, invAffine(-float64(img.W)/2, -float64(img.H)/2, 0, 0, 0, degrees(math.Atan(mag)), 0), tmp)
	case ShearY:
		geometric(img, invAffine(-float64(img.W)/2, -float64(img.H)/2, 0, 0, 0, 0, degrees(math.Atan(mag))), tmp)
	case TranslateX:
		geometric(img, invAffine(0, 0, 0, math.Trunc(mag), 0, 0, 0), tmp)
	case TranslateY:
		geometric(img, invAffine(0, 0, 0, 0, math.Trunc(mag), 0, 0), tmp)
	case Rotate:
		// torchvision's rotate turns counter-clockwise: the affine
		// matrix of angle -mag.
		geometric(img, invAffine(0, 0, -mag, 0, 0, 0, 0), tmp)
	case Brightness:
		f, g := blendFactors(mag)
		for i, v := range img.Pix {
			img.Pix[i] = blend(f, g, v, 0)
		}
	case Color:
		f, g := blendFactors(mag)
		plane := img.H * img.W
		r, gr, b := img.Pix[:plane], img.Pix[plane:2*plane], img.Pix[2*plane:3*plane]
		for i := range plane {
			l := float32(grey(r[i], gr[i], b[i]))
			r[i], gr[i], b[i] = blend(f, g, r[i], l), blend(f, g, gr[i], l), blend(f, g, b[i], l)
		}
	case Contrast:
		f, g := blendFactors(mag)
		plane := img.H * img.W
		sum := 0
		for i := range plane {
			sum += int(grey(img.Pix[i], img.Pix[plane+i], img.Pix[2*plane+i]))
		}
		// The float32 mean of integer greys: exact sum (below 2^24 for
		// images up to 256 × 256), one rounding in the division.
		mean := float32(sum) / float32(plane)
		for i, v := range img.Pix {
			img.Pix[i] = blend(f, g, v, mean)
		}
	case Sharpness:
		sharpen(img, mag, tmp)
	case Posterize:
		bits := int(mag)
		mask := uint8(0xff << (8 - bits))
		for i, v := range img.Pix {
			img.Pix[i] = v & mask
		}
	case Solarize:
		t := float32(mag)
		for i, v := range img.Pix {
			if float32(v) >= t {
				img.Pix[i] = 255 - v
			}
		}
	case AutoContrast:
		plane := img.H * img.W
		for c := range 3 {
			autoContrast(img.Pix[c*plane : (c+1)*plane])
		}
	case Equalize:
		plane := img.H * img.W
		for c := range 3 {
			equalize(img.Pix[c*plane : (c+1)*plane])
		}
	}
}

func degrees(rad float64) float64 { return rad * 180 / math.Pi }

// blendFactors are the float32 weights of torchvision's _blend with ratio
// 1+mag: the image's and the other's.
func blendFactors(mag float64) (float32, float32) {
	r := 1 + mag
	return float32(r), float32(1 - r)
}

// blend is f·v + g·o in float32, clamped to [0, 255] and truncated to
// uint8 (each product rounded on its own: no fused multiply-add).
func blend(f, g float32, v uint8, o float32) uint8 {
	x := float32(f*float32(v)) + float32(g*o)
	return uint8(min(max(x, 0), 255))
}

// grey is torchvision's rgb_to_grayscale of a uint8 pixel: ITU-R 601-2
// luma weights in float32, truncated.
func grey(r, g, b uint8) uint8 {
	x := float32(float32(0.2989)*float32(r)) + float32(float32(0.587)*float32(g))
	x += float32(float32(0.114) * float32(b))
	return uint8(x)
}

// sharpen blends img with its blur by [[1 1 1] [1 5 1] [1 1 1]]/13
// (rounded half to even), whose border rows and columns are the image's
// own; images of 2 pixels or fewer on a side stay as they are. The border
// is blended too: f·v + (1−f)·v need not give v back in float32.
func sharpen(img Planes, mag float64, tmp []uint8) {
	H, W := img.H, img.W
	if H <= 2 || W <= 2 {
		return
	}
	n := 3 * H * W
	if len(tmp) < n {
		tmp = make([]uint8, n)
	}
	blur := tmp[:n]
	copy(blur, img.Pix)
	k1, k5 := float32(1)/13, float32(5)/13
	for c := range 3 {
		p, q := img.Pix[c*H*W:(c+1)*H*W], blur[c*H*W:(c+1)*H*W]
		for y := 1; y < H-1; y++ {
			for x := 1; x < W-1; x++ {
				var s float32
				for dy := -1; dy <= 1; dy++ {
					row := p[(y+dy)*W:]
					for dx := -1; dx <= 1; dx++ {
						k := k1
						if dy == 0 && dx == 0 {
							k = k5
						}
						s += float32(k * float32(row[x+dx]))
					}
				}
				q[y*W+x] = uint8(math.RoundToEven(float64(s)))
			}
		}
	}
	f, g := blendFactors(mag)
	for i, v := range img.Pix {
		img.Pix[i] = blend(f, g, v, float32(blur[i]))
	}
}

// autoContrast stretches a channel's range to 0–255 in float32, truncated;
// a constant channel stays as it is.
func autoContrast(ch []uint8) {
	lo, hi := uint8(255), uint8(0)
	for _, v := range ch {
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo == hi {
		return
	}
	scale := 255 / (float32(hi) - float32(lo))
	for i, v := range ch {
		x := float32((float32(v) - float32(lo)) * scale)
		ch[i] = uint8(min(max(x, 0), 255))
	}
}

// equalize is PIL's (and torchvision's) histogram equalisation of a
// channel: the count below each value, plus half a step, in steps of the
// pixels not at the highest value present over 255; a step of 0 leaves the
// channel as it is.
func equalize(ch []uint8) {
	var hist [256]int
	for _, v := range ch {
		hist[v]++
	}
	top := 255
	for hist[top] == 0 {
		top--
	}
	step := (len(ch) - hist[top]) / 255
	if step == 0 {
		return
	}
	var lut [256]uint8
	below := 0
	for v := range 256 {
		lut[v] = uint8(min((below+step/2)/step, 255))
		below += hist[v]
	}
	for i, v := range ch {
		ch[i] = lut[v]
	}
}

// invAffine is the inverse of torchvision's affine map as its
// _get_inverse_affine_matrix builds it, in coordinates centred on the
// image (pixel centres at ±0.5, ±1.5, ...): the output point p comes from
// the input point M·(p − c − t) + c, where M undoes a rotation by angle
// degrees (clockwise on screen: y points down) after shears of shx and shy
// degrees, c is the centre of the transform and t the translation. It is
// row-major 2 × 3.
func invAffine(cx, cy, angle, tx, ty, shx, shy float64) [6]float64 {
	rot := angle * math.Pi / 180
	sx, sy := shx*math.Pi/180, shy*math.Pi/180
	// The forward rotation-shear [[a b] [c d]] has determinant 1, so
	// its inverse is [[d -b] [-c a]].
	a := math.Cos(rot-sy) / math.Cos(sy)
	b := -math.Cos(rot-sy)*math.Tan(sx)/math.Cos(sy) - math.Sin(rot)
	c := math.Sin(rot-sy) / math.Cos(sy)
	d := -math.Sin(rot-sy)*math.Tan(sx)/math.Cos(sy) + math.Cos(rot)
	m := [6]float64{d, -b, 0, -c, a, 0}
	ox, oy := -cx-tx, -cy-ty
	m[2] = m[0]*ox + m[1]*oy + cx
	m[5] = m[3]*ox + m[4]*oy + cy
	return m
}

// geometric resamples img through the inverse map inv with nearest
// sampling and 0 outside, in float32 as torchvision's affine does on a
// uint8 tensor: the map, scaled to grid_sample's [-1, 1] coordinates, is
// applied to the output's pixel centres, the result mapped back to input
// pixels and rounded half to even.
func geometric(img Planes, inv [6]float64, tmp []uint8) {
	H, W := img.H, img.W
	n := 3 * H * W
	if len(tmp) < n {
		tmp = make([]uint8, n)
	}
	src := tmp[:n]
	copy(src, img.Pix)
	hw, hh := float32(0.5*float64(W)), float32(0.5*float64(H))
	var t [6]float32
	for k, v := range inv {
		t[k] = float32(v)
	}
	// grid = [x y 1] · θᵀ / [W/2 H/2]
	gxx, gxy, gx1 := t[0]/hw, t[1]/hw, t[2]/hw
	gyx, gyy, gy1 := t[3]/hh, t[4]/hh, t[5]/hh
	sw, sh := float32(W)/2, float32(H)/2
	plane := H * W
	for oy := range H {
		by := float32(-float64(H)*0.5+0.5) + float32(oy)
		for ox := range W {
			bx := float32(-float64(W)*0.5+0.5) + float32(ox)
			gx := float32(float32(bx*gxx)+float32(by*gxy)) + gx1
			gy := float32(float32(bx*gyx)+float32(by*gyy)) + gy1
			// grid_sample, align_corners = False: ((g+1)·size − 1)/2.
			ix := math.RoundToEven(float64(float32(float32(gx+1)*sw) - 0.5))
			iy := math.RoundToEven(float64(float32(float32(gy+1)*sh) - 0.5))
			o := oy*W + ox
			if ix < 0 || iy < 0 || ix >= float64(W) || iy >= float64(H) {
				img.Pix[o], img.Pix[plane+o], img.Pix[2*plane+o] = 0, 0, 0
				continue
			}
			s := int(iy)*W + int(ix)
			img.Pix[o], img.Pix[plane+o], img.Pix[2*plane+o] = src[s], src[plane+s], src[2*plane+s]
		}
	}
}
