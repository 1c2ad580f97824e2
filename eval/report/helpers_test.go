package report

import (
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
)

// phantom returns a 3D Shepp–Logan-like volume of the given shape: nested
// ellipsoids of different intensities, with a few small bright "lesions",
// in C order (axis 0 slowest), values roughly in [0, 1].
func phantom(shape [3]int) []float32 {
	type ellipsoid struct {
		c, r [3]float64
		v    float64
	}
	es := []ellipsoid{
		{[3]float64{0, 0, 0}, [3]float64{0.9, 0.92, 0.69}, 1},
		{[3]float64{0, -0.018, 0}, [3]float64{0.85, 0.87, 0.66}, -0.8},
		{[3]float64{0, 0, 0.22}, [3]float64{0.41, 0.28, 0.11}, -0.2},
		{[3]float64{0, 0, -0.22}, [3]float64{0.5, 0.41, 0.16}, -0.2},
		{[3]float64{0.25, 0.35, 0}, [3]float64{0.3, 0.25, 0.21}, 0.1},
		{[3]float64{0, 0.1, 0}, [3]float64{0.046, 0.046, 0.046}, 0.3},
		{[3]float64{-0.1, -0.6, -0.08}, [3]float64{0.06, 0.046, 0.046}, 0.3},
	}
	v := make([]float32, shape[0]*shape[1]*shape[2])
	for z := range shape[0] {
		for y := range shape[1] {
			for x := range shape[2] {
				p := [3]float64{
					2*(float64(z)+0.5)/float64(shape[0]) - 1,
					2*(float64(y)+0.5)/float64(shape[1]) - 1,
					2*(float64(x)+0.5)/float64(shape[2]) - 1,
				}
				s := 0.0
				for _, e := range es {
					d := 0.0
					for i := range 3 {
						t := (p[i] - e.c[i]) / e.r[i]
						d += t * t
					}
					if d <= 1 {
						s += e.v
					}
				}
				v[(z*shape[1]+y)*shape[2]+x] = float32(s)
			}
		}
	}
	return v
}

// degrade returns a "reconstruction" of v: a 3×3×3 box blur plus Gaussian
// noise of standard deviation sigma, so the error map has structure (edges)
// and texture (noise).
func degrade(v []float32, shape [3]int, sigma float64, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 2))
	d, h, w := shape[0], shape[1], shape[2]
	out := make([]float32, len(v))
	for z := range d {
		for y := range h {
			for x := range w {
				s, n := 0.0, 0
				for dz := -1; dz <= 1; dz++ {
					for dy := -1; dy <= 1; dy++ {
						for dx := -1; dx <= 1; dx++ {
							zz, yy, xx := z+dz, y+dy, x+dx
							if zz < 0 || yy < 0 || xx < 0 || zz >= d || yy >= h || xx >= w {
								continue
							}
							s += float64(v[(zz*h+yy)*w+xx])
							n++
						}
					}
				}
				out[(z*h+y)*w+x] = float32(s/float64(n) + r.NormFloat64()*sigma)
			}
		}
	}
	return out
}

// nifti is a volume read by readNIfTI.
type nifti struct {
	shape   [3]int // axis 0 = NIfTI k (slowest), axis 2 = NIfTI i
	spacing [3]float64
	data    []float32
}

// readNIfTI reads a single-volume NIfTI-1 file (.nii or .nii.gz) for the
// manual demo; it handles the common scalar datatypes and scl_slope/inter.
func readNIfTI(path string) (*nifti, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		r = gz
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(b) < 348 || string(b[344:347]) != "n+1" {
		return nil, fmt.Errorf("%s: not a single-file NIfTI-1", path)
	}
	le := binary.LittleEndian
	if le.Uint32(b[0:4]) != 348 {
		return nil, fmt.Errorf("%s: big-endian NIfTI not supported by this demo reader", path)
	}
	i16 := func(o int) int { return int(int16(le.Uint16(b[o:]))) }
	f32 := func(o int) float64 { return float64(math.Float32frombits(le.Uint32(b[o:]))) }
	nx, ny, nz := i16(42), i16(44), i16(46)
	if i16(40) > 3 && i16(48) > 1 {
		return nil, fmt.Errorf("%s: 4D NIfTI not supported", path)
	}
	datatype := i16(70)
	off := int(f32(108))
	slope, inter := f32(112), f32(116)
	if slope == 0 {
		slope = 1
	}
	n := nx * ny * nz
	v := &nifti{shape: [3]int{nz, ny, nx}, spacing: [3]float64{f32(88), f32(84), f32(80)}, data: make([]float32, n)}
	size := map[int]int{2: 1, 4: 2, 8: 4, 16: 4, 64: 8, 512: 2}[datatype]
	if size == 0 {
		return nil, fmt.Errorf("%s: datatype %d not supported", path, datatype)
	}
	if len(b) < off+n*size {
		return nil, fmt.Errorf("%s: %d bytes, want %d", path, len(b), off+n*size)
	}
	for i := range n {
		p := b[off+i*size:]
		var x float64
		switch datatype {
		case 2:
			x = float64(p[0])
		case 4:
			x = float64(int16(le.Uint16(p)))
		case 8:
			x = float64(int32(le.Uint32(p)))
		case 16:
			x = float64(math.Float32frombits(le.Uint32(p)))
		case 64:
			x = math.Float64frombits(le.Uint64(p))
		case 512:
			x = float64(le.Uint16(p))
		}
		v.data[i] = float32(x*slope + inter)
	}
	return v, nil
}
