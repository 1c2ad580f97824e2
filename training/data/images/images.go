// Package images loads ImageNet-style classification data for ResNet-50:
// class folders (as torchvision's ImageFolder reads them) or file lists of
// JPEG, PNG, BMP, TIFF, WebP and PPM/PGM files, RandomResizedCrop and
// horizontal flip for training, resize-then-center-crop for validation,
// normalised float32 in NCHW or NHWC. JPEGs decode through libjpeg-turbo
// with DCT scaling and cropping, which BenchmarkDecode measures at several
// times Go's image/jpeg.
package images

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/safefile"
)

// Item is one image and its class.
type Item struct {
	Path  string
	Label int
}

// List reads a file list: lines of "path label", paths relative to root.
func List(path, root string) ([]Item, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var items []Item
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		label, err := -1, error(nil)
		if len(fields) == 2 {
			label, err = strconv.Atoi(fields[1])
		}
		if len(fields) != 2 || err != nil || label < 0 {
			return nil, fmt.Errorf("%s:%d: want \"path label\" with a label ≥ 0, got %q", filepath.Base(path), line, sc.Text())
		}
		items = append(items, Item{filepath.Join(root, fields[0]), label})
	}
	return items, sc.Err()
}

// Layout is the order of an image tensor's dimensions.
type Layout int

// The two layouts ONNX models of ResNet-50 take.
const (
	NCHW Layout = iota
	NHWC
)

// Decoder picks the JPEG decoder.
type Decoder int

// LibJPEGTurbo is the default: several times faster (BenchmarkDecode).
const (
	LibJPEGTurbo Decoder = iota
	GoJPEG
)

// Config sets up a Dataset; zero fields take the ImageNet defaults.
type Config struct {
	// Train selects RandomResizedCrop(Size, scale 0.08–1, ratio 3/4–4/3)
	// and a random horizontal flip; otherwise the shorter side is resized
	// to Resize and the center Size×Size cropped.
	Train   bool
	Size    int // 224
	Resize  int // validation's shorter side before the crop; 0: Size·256/224
	Layout  Layout
	Mean    [3]float32 // ImageNet's, on [0, 1] pixels
	Std     [3]float32
	Decoder Decoder
	// RandomErase is the probability of torchvision's RandomErasing on a
	// training image (scale 0.02–0.33, ratio 0.3–3.3, erased to 0 after
	// normalisation); 0 never.
	RandomErase float64
	// AutoAugment applies TrivialAugmentWide or RandAugment to training
	// images after the crop and flip, on uint8 pixels (the resampled crop
	// rounded, as a PIL or uint8 tensor pipeline holds it), before
	// normalisation and RandomErasing. RandAugmentN ops (0: 2) at bin
	// RandAugmentM (0–30) for RandAugment.
	AutoAugment  AutoAugment
	RandAugmentN int
	RandAugmentM int
	// Classes > 0 adds "soft_label", float32 [Classes]: the label one-hot,
	// which MixUp and CutMix (Mixer) then mix across the batch.
	Classes int
	// ClassNames names the classes by label: the training set's list from
	// Folders, which MapFolders labels a validation set by. Every label
	// must index it. Nil for a file list, whose classes have no names.
	ClassNames []string
}

// Dataset is a data.Dataset of "image" float32 [3, Size, Size] (or
// [Size, Size, 3] for NHWC) and "label" int64 (a scalar: [N] once batched).
type Dataset struct {
	items      []Item
	cfg        Config
	numClasses int
	// scratch keeps per-goroutine decode buffers so that warm loading does
	// not allocate them per image.
	scratch sync.Pool
}

// New checks cfg and fills in defaults.
func New(items []Item, cfg Config) (*Dataset, error) {
	if len(items) == 0 {
		return nil, fmt.Errorf("images: no images")
	}
	if cfg.Size == 0 {
		cfg.Size = 224
	}
	if cfg.Resize == 0 {
		// torchvision's ratio: 256 for a 224 crop, at any crop size (a
		// fixed 256 would keep a quarter of a 64-px image's short side).
		cfg.Resize = (cfg.Size*256 + 112) / 224
	}
	if cfg.Std == ([3]float32{}) {
		cfg.Mean, cfg.Std = [3]float32{0.485, 0.456, 0.406}, [3]float32{0.229, 0.224, 0.225}
	}
	if cfg.Size < 1 || cfg.Resize < cfg.Size {
		return nil, fmt.Errorf("images: crop %d from resize %d", cfg.Size, cfg.Resize)
	}
	if cfg.RandAugmentN == 0 {
		cfg.RandAugmentN = 2
	}
	if cfg.AutoAugment < NoAutoAugment || cfg.AutoAugment > RandAugment || cfg.RandAugmentN < 1 || cfg.RandAugmentM < 0 || cfg.RandAugmentM >= MagnitudeBins {
		return nil, fmt.Errorf("images: auto-augment policy %d with %d ops at bin %d of 0–%d", cfg.AutoAugment, cfg.RandAugmentN, cfg.RandAugmentM, MagnitudeBins-1)
	}
	numClasses := len(cfg.ClassNames)
	for _, it := range items {
		if cfg.ClassNames != nil && it.Label >= len(cfg.ClassNames) {
			return nil, fileError(it.Path, fmt.Errorf("label %d, but there are %d class names", it.Label, len(cfg.ClassNames)))
		}
		numClasses = max(numClasses, it.Label+1)
	}
	return &Dataset{items: items, cfg: cfg, numClasses: numClasses, scratch: sync.Pool{New: func() any { return new(scratch) }}}, nil
}

// ClassNames names the classes by label (Config.ClassNames): for class
// folders, the training set's sorted class folder names, also for a
// validation set that lacks some of them. Nil for a file list.
func (d *Dataset) ClassNames() []string { return d.cfg.ClassNames }

// NumClasses is the number of classes the labels index: len(ClassNames()),
// or for a file list the largest label + 1. A model needs at least as many
// outputs.
func (d *Dataset) NumClasses() int { return d.numClasses }

type scratch struct {
	file, rgb []byte
	taps      []tap
	rows      []float32 // resample's cached rows
	// The crop as float [0, 255] and uint8 planes, and the ops' scratch,
	// for auto-augmentation.
	crop     []float32
	pix, tmp []uint8
}

// Len is the number of images.
func (d *Dataset) Len() int { return len(d.items) }

// Spec is the image and its label.
func (d *Dataset) Spec() []data.TensorSpec {
	s := d.cfg.Size
	shape := []int{3, s, s}
	if d.cfg.Layout == NHWC {
		shape = []int{s, s, 3}
	}
	spec := []data.TensorSpec{{Name: "image", DType: data.Float32, Shape: shape}, {Name: "label", DType: data.Int64}}
	if d.cfg.Classes > 0 {
		spec = append(spec, data.TensorSpec{Name: SoftLabel, DType: data.Float32, Shape: []int{d.cfg.Classes}})
	}
	return spec
}

// Load decodes, crops, flips and normalises image i.
func (d *Dataset) Load(i int, rng *rand.Rand, dst data.Sample) error {
	it := d.items[i]
	sc := d.scratch.Get().(*scratch)
	defer d.scratch.Put(sc)
	f, err := safefile.Open(it.Path)
	if err != nil {
		return fileError(it.Path, err)
	}
	sc.file, err = readAll(f, sc.file[:0])
	f.Close()
	if err != nil {
		return fileError(it.Path, err)
	}
	var reg region
	reg, sc.rgb, err = d.decode(sc.file, rng, sc.rgb)
	if err != nil {
		return fileError(it.Path, err)
	}
	flip := d.cfg.Train && rng.IntN(2) == 1
	if d.cfg.Train && d.cfg.AutoAugment != NoAutoAugment {
		d.autoAugment(reg, flip, sc, rng, dst[0].F32)
	} else {
		d.resample(reg, flip, sc, dst[0].F32)
	}
	if d.cfg.Train && d.cfg.RandomErase > 0 && rng.Float64() < d.cfg.RandomErase {
		d.erase(dst[0].F32, rng)
	}
	dst[1].I64[0] = int64(it.Label)
	if d.cfg.Classes > 0 {
		if it.Label >= d.cfg.Classes {
			return fileError(it.Path, fmt.Errorf("label %d, but the model has %d classes", it.Label, d.cfg.Classes))
		}
		soft := dst[2].F32
		clear(soft)
		soft[it.Label] = 1
	}
	return nil
}

// fileError is err about the image at path, naming its absolute path:
// base names such as 1.jpg repeat in every class folder of an
// ImageNet-style tree.
func fileError(path string, err error) error {
	if abs, aerr := filepath.Abs(path); aerr == nil {
		path = abs
	}
	var nf *safefile.NotFileError
	if errors.As(err, &nf) {
		return err // names the path itself
	}
	if pe, ok := err.(*fs.PathError); ok {
		err = pe.Err // the path once, absolute
	}
	return fmt.Errorf("%s: %w", path, err)
}

// normalisation is the per-channel scale and bias taking [0, 255] pixels
// to (x/255 − mean)/std.
func (d *Dataset) normalisation() (scale, bias [3]float32) {
	for c := range 3 {
		scale[c] = 1 / (255 * d.cfg.Std[c])
		bias[c] = -d.cfg.Mean[c] / d.cfg.Std[c]
	}
	return scale, bias
}

// autoAugment resamples the crop to [0, 255] planes, rounds them to uint8,
// applies the policy's ops drawn from rng and writes the normalised image.
func (d *Dataset) autoAugment(reg region, flip bool, sc *scratch, rng *rand.Rand, out []float32) {
	S := d.cfg.Size
	scale, bias := d.normalisation()
	n := 3 * S * S
	sc.crop = slices.Grow(sc.crop[:0], n)[:n]
	sc.pix = slices.Grow(sc.pix[:0], n)[:n]
	sc.tmp = slices.Grow(sc.tmp[:0], n)[:n]
	d.resampleTo(reg, flip, sc, sc.crop, [3]float32{1, 1, 1}, [3]float32{}, NCHW)
	for i, v := range sc.crop {
		sc.pix[i] = uint8(min(max(v+0.5, 0), 255))
	}
	img := Planes{Pix: sc.pix, H: S, W: S}
	augmenter{d.cfg.AutoAugment, d.cfg.RandAugmentN, d.cfg.RandAugmentM}.draw(img, sc.tmp, rng)
	plane := S * S
	for c := range 3 {
		p := sc.pix[c*plane : (c+1)*plane]
		for i, v := range p {
			k := c*plane + i
			if d.cfg.Layout == NHWC {
				k = 3*i + c
			}
			out[k] = float32(v)*scale[c] + bias[c]
		}
	}
}

// erase zeroes a random box of img as torchvision's RandomErasing: up to
// ten tries at an area of 2–33 % of the image and an aspect ratio of
// 0.3–3.3 (log-uniform) until the box fits; none fitting erases nothing.
func (d *Dataset) erase(img []float32, rng *rand.Rand) {
	s := d.cfg.Size
	area := float64(s * s)
	for range 10 {
		a := area * (0.02 + 0.31*rng.Float64())
		r := math.Exp(math.Log(0.3) + (math.Log(3.3)-math.Log(0.3))*rng.Float64())
		h, w := int(math.Round(math.Sqrt(a*r))), int(math.Round(math.Sqrt(a/r)))
		if h >= s || w >= s {
			continue
		}
		y0, x0 := rng.IntN(s-h+1), rng.IntN(s-w+1)
		for y := y0; y < y0+h; y++ {
			for x := x0; x < x0+w; x++ {
				for c := range 3 {
					k := (c*s+y)*s + x
					if d.cfg.Layout == NHWC {
						k = (y*s+x)*3 + c
					}
					img[k] = 0
				}
			}
		}
		return
	}
}

// readAll reads f into buf, reusing its capacity.
func readAll(f *os.File, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(cap(buf), 64<<10))
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// region is a crop of decoded RGB pixels: rows of stride bytes, the crop
// starting at fractional pixel (x, y) with size w × h.
type region struct {
	pix        []byte
	stride     int
	cols, rows int // pixels held
	x, y, w, h float64
}

// decode picks the crop in source pixels, decodes as little of the image as
// the crop needs and returns the crop as a region of RGB pixels.
func (d *Dataset) decode(file []byte, rng *rand.Rand, buf []byte) (region, []byte, error) {
	if isJPEG(file) && d.cfg.Decoder == LibJPEGTurbo {
		W, H, err := turboInfo(file)
		if err != nil {
			return region{}, buf, err
		}
		if W < 1 || H < 1 || W > maxPixels/H {
			// As decodeImage refuses it: a header claiming billions of
			// pixels is a broken or hostile file, not a photograph.
			return region{}, buf, fmt.Errorf("JPEG of %d × %d pixels: want 1 to %d pixels", W, H, maxPixels)
		}
		x, y, w, h := d.crop(W, H, rng)
		// The smallest DCT scale num/8 that keeps the crop at least Size
		// pixels on both sides: decoding at lower resolution is cheaper.
		num := 8
		for n := 1; n < 8; n++ {
			if w*float64(n)/8 >= float64(d.cfg.Size) && h*float64(n)/8 >= float64(d.cfg.Size) {
				num = n
				break
			}
		}
		s := float64(num) / 8
		sw, sh := (W*num+7)/8, (H*num+7)/8
		// One pixel of margin: bilinear taps at the crop's edge.
		x0, y0 := max(min(int(x*s), sw-1)-1, 0), max(min(int(y*s), sh-1)-1, 0)
		x1, y1 := min(int(math.Ceil((x+w)*s))+1, sw), min(int(math.Ceil((y+h)*s))+1, sh)
		rgb, ox, ow, err := turboDecode(file, num, x0, y0, x1-x0, y1-y0, buf)
		if err != nil {
			return region{}, rgb, err
		}
		return region{pix: rgb, stride: 3 * ow, cols: ow, rows: y1 - y0, x: x*s - float64(ox), y: y*s - float64(y0), w: w * s, h: h * s}, rgb, nil
	}
	img, err := decodeImage(file)
	if err != nil {
		return region{}, buf, err
	}
	b := img.Bounds()
	x, y, w, h := d.crop(b.Dx(), b.Dy(), rng)
	x0, y0 := max(int(x)-1, 0), max(int(y)-1, 0)
	x1, y1 := min(int(math.Ceil(x+w))+1, b.Dx()), min(int(math.Ceil(y+h))+1, b.Dy())
	buf = toRGB(img, image.Rect(x0, y0, x1, y1).Add(b.Min), buf)
	return region{pix: buf, stride: 3 * (x1 - x0), cols: x1 - x0, rows: y1 - y0, x: x - float64(x0), y: y - float64(y0), w: w, h: h}, buf, nil
}

// crop is the source rectangle that becomes the Size×Size output.
func (d *Dataset) crop(W, H int, rng *rand.Rand) (x, y, w, h float64) {
	if d.cfg.Train {
		return randomResizedCrop(W, H, rng)
	}
	// Resize the shorter side to Resize, then take the center Size: in
	// source pixels, a center square of short×Size/Resize.
	side := float64(min(W, H)) * float64(d.cfg.Size) / float64(d.cfg.Resize)
	return (float64(W) - side) / 2, (float64(H) - side) / 2, side, side
}

// randomResizedCrop follows torchvision: ten tries at an area of 8–100% and
// a log-uniform aspect ratio of 3/4–4/3, then the whole image's center
// clamped to that ratio range.
func randomResizedCrop(W, H int, rng *rand.Rand) (x, y, w, h float64) {
	area := float64(W * H)
	for range 10 {
		a := area * (0.08 + 0.92*rng.Float64())
		r := math.Exp(math.Log(3.0/4) + (math.Log(4.0/3)-math.Log(3.0/4))*rng.Float64())
		cw, ch := math.Round(math.Sqrt(a*r)), math.Round(math.Sqrt(a/r))
		if cw >= 1 && ch >= 1 && cw <= float64(W) && ch <= float64(H) {
			return float64(rng.IntN(W - int(cw) + 1)), float64(rng.IntN(H - int(ch) + 1)), cw, ch
		}
	}
	w, h = float64(W), float64(H)
	switch r := w / h; {
	case r < 3.0/4:
		h = math.Round(w * 4 / 3)
	case r > 4.0/3:
		w = math.Round(h * 4 / 3)
	}
	return (float64(W) - w) / 2, (float64(H) - h) / 2, w, h
}

// resample maps the region's crop to Size×Size with bilinear filtering
// (pixel centres aligned, as torchvision's resize), flips, normalises and
// writes the layout. It is a good part of a sample's cost after decoding,
// so it runs separably: the per-column taps are tabulated once, each source
// row that an output row needs is interpolated along x once into a cached
// row (consecutive output rows share source rows), and each output row is
// the blend of two cached rows. The arithmetic is that of a direct bilinear
// tap, a0+wx·(a1-a0) per source row then a+wy·(b-a), each rounded to
// float32, so the split changes no value (a GOAMD64=v3 build may contract
// some of it into FMAs, changing last bits either way).
func (d *Dataset) resample(r region, flip bool, sc *scratch, out []float32) {
	scale, bias := d.normalisation()
	d.resampleTo(r, flip, sc, out, scale, bias, d.cfg.Layout)
}

// resampleTo is resample with the normalisation (x·scale + bias, x the
// interpolated [0, 255] pixel) and layout given.
func (d *Dataset) resampleTo(r region, flip bool, sc *scratch, out []float32, scale, bias [3]float32, layout Layout) {
	S := d.cfg.Size
	// Column taps: byte offsets of the left and right neighbours, weight of
	// the right one, ordered by output position after the flip.
	sc.taps = slices.Grow(sc.taps[:0], S)[:S]
	sx, sy := r.w/float64(S), r.h/float64(S)
	for ox := range S {
		fx := min(max(r.x+(float64(ox)+0.5)*sx-0.5, 0), float64(r.cols-1))
		i := min(int(fx), max(r.cols-2, 0))
		i1 := min(i+1, r.cols-1)
		dx := ox
		if flip {
			dx = S - 1 - ox
		}
		sc.taps[dx] = tap{int32(3 * i), int32(3 * i1), float32(fx - float64(i))}
	}
	// Two cached rows, each three channel planes of S values, tagged with
	// the source row they hold.
	sc.rows = slices.Grow(sc.rows[:0], 6*S)[:6*S]
	cache := [2]hrow{{-1, sc.rows[:3*S]}, {-1, sc.rows[3*S:]}}
	// get returns the cached row j, filling the entry not holding row keep.
	get := func(j, keep int) []float32 {
		for _, e := range cache {
			if e.src == j {
				return e.v
			}
		}
		e := &cache[0]
		if e.src == keep {
			e = &cache[1]
		}
		e.src = j
		row := r.pix[j*r.stride : j*r.stride+r.stride]
		taps := sc.taps[:S]
		vR, vG, vB := e.v[:S], e.v[S:][:S], e.v[2*S:][:S]
		for dx, t := range taps {
			p0, p1 := (*[3]byte)(row[t.i0:]), (*[3]byte)(row[t.i1:])
			a0, a1 := float32(p0[0]), float32(p1[0])
			vR[dx] = a0 + t.w*(a1-a0)
			a0, a1 = float32(p0[1]), float32(p1[1])
			vG[dx] = a0 + t.w*(a1-a0)
			a0, a1 = float32(p0[2]), float32(p1[2])
			vB[dx] = a0 + t.w*(a1-a0)
		}
		return e.v
	}
	plane := S * S
	for oy := range S {
		fy := min(max(r.y+(float64(oy)+0.5)*sy-0.5, 0), float64(r.rows-1))
		j := min(int(fy), max(r.rows-2, 0))
		j1 := min(j+1, r.rows-1)
		wy := float32(fy - float64(j))
		a := get(j, j1)
		b := get(j1, j)
		if layout == NHWC {
			o := out[oy*S*3 : (oy+1)*S*3]
			for c := range 3 {
				ac, bc := a[c*S:][:S], b[c*S:][:S]
				for dx := range ac {
					o[3*dx+c] = (ac[dx]+wy*(bc[dx]-ac[dx]))*scale[c] + bias[c]
				}
			}
			continue
		}
		for c := range 3 {
			o := out[c*plane+oy*S:][:S]
			ac, bc := a[c*S:][:S], b[c*S:][:S]
			sc, bi := scale[c], bias[c]
			for dx := range o {
				o[dx] = (ac[dx]+wy*(bc[dx]-ac[dx]))*sc + bi
			}
		}
	}
}

// tap is one output column's horizontal filter.
type tap struct {
	i0, i1 int32
	w      float32
}

// hrow is a source row interpolated along x, or src -1 for none.
type hrow struct {
	src int
	v   []float32
}
