package report

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"image"
	"image/color"
	"image/png"
	"math"
	"slices"

	"gonum.org/v1/plot/palette/moreland"
)

// view names a plane through a volume by the axis held fixed. Volumes are
// stored in C order with axis 0 slowest; for NIfTI-derived volumes (x
// fastest on disk) axis 0 is the inferior–superior axis, axis 1
// posterior–anterior and axis 2 left–right, which is what the names assume.
type view int

const (
	// axial holds axis 0 fixed: rows are axis 1, columns axis 2.
	axial view = iota
	// coronal holds axis 1 fixed: rows are axis 0, columns axis 2.
	coronal
	// sagittal holds axis 2 fixed: rows are axis 0, columns axis 1.
	sagittal
)

// String returns the view's anatomical name.
func (v view) String() string {
	return [...]string{"axial", "coronal", "sagittal"}[v]
}

// plane is a 2D image of float samples, row-major, with physical pixel
// sizes dx (along a row) and dy (between rows). Row 0 is the top of the
// picture.
type plane struct {
	w, h   int
	dx, dy float64
	pix    []float32
}

// extract returns the plane of vol (shape, spacing in axis order) that
// holds the axis of view fixed at index k. Rows are flipped so that the row
// axis' index grows upward, as NIfTI viewers draw RAS volumes (anterior and
// superior at the top).
func extract(vol []float32, shape [3]int, spacing [3]float64, fixed view, k int) plane {
	d, h, w := shape[0], shape[1], shape[2]
	at := func(z, y, x int) float32 { return vol[(z*h+y)*w+x] }
	var p plane
	switch fixed {
	case axial:
		p = plane{w: w, h: h, dx: spacing[2], dy: spacing[1]}
		p.pix = make([]float32, 0, w*h)
		for y := h - 1; y >= 0; y-- {
			p.pix = append(p.pix, vol[(k*h+y)*w:][:w]...)
		}
	case coronal:
		p = plane{w: w, h: d, dx: spacing[2], dy: spacing[0]}
		p.pix = make([]float32, 0, w*d)
		for z := d - 1; z >= 0; z-- {
			p.pix = append(p.pix, vol[(z*h+k)*w:][:w]...)
		}
	case sagittal:
		p = plane{w: h, h: d, dx: spacing[1], dy: spacing[0]}
		p.pix = make([]float32, 0, h*d)
		for z := d - 1; z >= 0; z-- {
			for y := range h {
				p.pix = append(p.pix, at(z, y, k))
			}
		}
	}
	return p
}

// displaySize returns the pixel size of p's picture when one display pixel
// is pixel physical units square.
func displaySize(p plane, pixel float64) (w, h int) {
	return max(1, int(math.Round(float64(p.w)*p.dx/pixel))), max(1, int(math.Round(float64(p.h)*p.dy/pixel)))
}

// resample returns p bilinearly resampled to w×h pixels. Called with the
// size from displaySize it makes pixels square, so anisotropic volumes keep
// their physical proportions.
func resample(p plane, w, h int) plane {
	out := plane{w: w, h: h, dx: p.dx * float64(p.w) / float64(w), dy: p.dy * float64(p.h) / float64(h), pix: make([]float32, w*h)}
	// Source coordinate of an output pixel centre, clamped to the samples.
	src := func(i, n, m int) (int, int, float32) {
		u := (float64(i)+0.5)*float64(m)/float64(n) - 0.5
		u = math.Max(0, math.Min(u, float64(m-1)))
		i0 := int(u)
		return i0, min(i0+1, m-1), float32(u - float64(i0))
	}
	for y := range h {
		y0, y1, fy := src(y, h, p.h)
		for x := range w {
			x0, x1, fx := src(x, w, p.w)
			top := p.pix[y0*p.w+x0]*(1-fx) + p.pix[y0*p.w+x1]*fx
			bot := p.pix[y1*p.w+x0]*(1-fx) + p.pix[y1*p.w+x1]*fx
			out.pix[y*w+x] = top*(1-fy) + bot*fy
		}
	}
	return out
}

// unit maps v to [0, 1] for the window [lo, hi], clamping outside it.
func unit(v float32, lo, hi float64) float64 {
	return math.Max(0, math.Min(1, (float64(v)-lo)/(hi-lo)))
}

// grey renders p in grey levels over the window [lo, hi].
func grey(p plane, lo, hi float64) *image.Gray {
	img := image.NewGray(image.Rect(0, 0, p.w, p.h))
	for i, v := range p.pix {
		img.Pix[i] = uint8(math.Round(255 * unit(v, lo, hi)))
	}
	return img
}

// colourMap is a 256-entry lookup table sampled from Moreland's black-body
// colour map (gonum.org/v1/plot/palette/moreland), a sequential map whose
// CIELAB lightness rises linearly from black to white, so larger errors are
// always brighter, also in greyscale print and for colour-blind readers.
var colourMap = blackBody(256)

// blackBody samples Moreland's black-body map at n evenly spaced points.
func blackBody(n int) []color.NRGBA {
	cm := moreland.BlackBody()
	cm.SetMin(0)
	cm.SetMax(1)
	lut := make([]color.NRGBA, n)
	for i := range lut {
		c, err := cm.At(float64(i) / float64(n-1))
		if err != nil {
			// At fails only outside [min, max], which i/(n−1) never is.
			panic(fmt.Sprintf("report: black-body colour map at %d/%d: %v", i, n-1, err))
		}
		lut[i] = color.NRGBAModel.Convert(c).(color.NRGBA)
	}
	return lut
}

// coloured renders p through colourMap over [0, top].
func coloured(p plane, top float64) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, p.w, p.h))
	last := float64(len(colourMap) - 1)
	for i, v := range p.pix {
		c := colourMap[int(math.Round(last*unit(v, 0, top)))]
		copy(img.Pix[4*i:], []uint8{c.R, c.G, c.B, c.A})
	}
	return img
}

// colourBar returns a horizontal w×h ramp of colourMap, or of grey levels.
func colourBar(w, h int, greyRamp bool) image.Image {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		t := float64(x) / float64(w-1)
		c := colourMap[int(math.Round(t*float64(len(colourMap)-1)))]
		if greyRamp {
			g := uint8(math.Round(255 * t))
			c = color.NRGBA{g, g, g, 255}
		}
		for y := range h {
			img.SetNRGBA(x, y, c)
		}
	}
	return img
}

// dataURI encodes img as a PNG data URI. The URI is built here from our own
// bytes, so marking it safe for html/template is sound.
func dataURI(img image.Image) (template.URL, error) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return "", fmt.Errorf("report: encoding PNG: %w", err)
	}
	return pngURI(buf.Bytes()), nil
}

// pngURI wraps PNG bytes in a data URI.
func pngURI(b []byte) template.URL {
	return template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(b))
}

// rangeOf returns the minimum and maximum of the finite values of v, and
// false if there are none.
func rangeOf(v []float32) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		lo, hi = math.Min(lo, f), math.Max(hi, f)
	}
	return lo, hi, lo <= hi
}

// errorQuantile estimates the q-quantile of |a−b| from a regular subsample
// of at most 1<<20 voxels, enough for a colour scale and cheap on volumes
// of hundreds of millions of voxels. Non-finite differences are skipped.
func errorQuantile(a, b []float32, q float64) float64 {
	stride := max(1, (len(a)+(1<<20)-1)>>20)
	s := make([]float64, 0, len(a)/stride+1)
	for i := 0; i < len(a); i += stride {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if !math.IsNaN(d) && !math.IsInf(d, 0) {
			s = append(s, d)
		}
	}
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[int(math.Round(q*float64(len(s)-1)))]
}
