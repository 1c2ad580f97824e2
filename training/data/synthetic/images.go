package synthetic

import (
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Photo is a w×h image with the statistics of a photograph as far as a
// JPEG encoder is concerned: smooth gradients and blobs (low frequencies)
// under sensor-like noise (high frequencies). Class c tints it and adds
// stripes whose angle and frequency depend on c, so that classes are
// learnable. At 500×375 and quality 90 it encodes to about 110 KB, like an
// average ImageNet JPEG.
func Photo(w, h, class int, rng *rand.Rand) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	type blob struct{ x, y, r, c0, c1, c2 float64 }
	blobs := make([]blob, 6)
	for i := range blobs {
		blobs[i] = blob{rng.Float64() * float64(w), rng.Float64() * float64(h), (0.1 + 0.3*rng.Float64()) * float64(w), rng.Float64(), rng.Float64(), rng.Float64()}
	}
	angle := float64(class) * 2.39996 // golden angle: classes spread out
	freq := 0.02 + 0.01*float64(class%7)
	tint := [3]float64{math.Sin(float64(class)), math.Sin(float64(class) + 2), math.Sin(float64(class) + 4)}
	ca, sa := math.Cos(angle), math.Sin(angle)
	for y := range h {
		for x := range w {
			fx, fy := float64(x), float64(y)
			v := [3]float64{0.3 + 0.4*fx/float64(w), 0.3 + 0.3*fy/float64(h), 0.5}
			for _, b := range blobs {
				d := (fx-b.x)*(fx-b.x) + (fy-b.y)*(fy-b.y)
				g := math.Exp(-d / (b.r * b.r))
				v[0] += 0.5 * g * (b.c0 - 0.5)
				v[1] += 0.5 * g * (b.c1 - 0.5)
				v[2] += 0.5 * g * (b.c2 - 0.5)
			}
			stripe := 0.12 * math.Sin((fx*ca+fy*sa)*freq*2*math.Pi)
			o := img.PixOffset(x, y)
			for c := range 3 {
				p := v[c] + 0.15*tint[c] + stripe + 0.095*rng.NormFloat64()
				img.Pix[o+c] = uint8(min(max(p*255, 0), 255))
			}
			img.Pix[o+3] = 255
		}
	}
	return img
}

// WriteImageFolder writes an ImageNet-style tree root/classNN/imgNNN.jpg
// of Photo images (every fourth a .png) and returns the file paths.
func WriteImageFolder(root string, classes, perClass, w, h int, seed uint64) ([]string, error) {
	var paths []string
	for c := range classes {
		dir := filepath.Join(root, fmt.Sprintf("class%02d", c))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		for i := range perClass {
			rng := rand.New(rand.NewPCG(seed, uint64(c*perClass+i)))
			ext := ".jpg"
			if i%4 == 3 {
				ext = ".png"
			}
			p := filepath.Join(dir, fmt.Sprintf("img%03d%s", i, ext))
			if err := WriteImage(p, Photo(w, h, c, rng)); err != nil {
				return nil, err
			}
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// WriteImage writes img as JPEG (quality 90) or PNG, by path's extension.
func WriteImage(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if filepath.Ext(path) == ".png" {
		err = png.Encode(f, img)
	} else {
		err = jpeg.Encode(f, img, &jpeg.Options{Quality: 90})
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
