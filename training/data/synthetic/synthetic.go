// Package synthetic makes stand-in data for demos, tests and benchmarks of
// the pipelines: 3D Shepp–Logan phantoms written as NIfTI, GSM8K-format
// arithmetic problems, and folders of class images.
package synthetic

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/ortrain/ortrain/training/data/nifti"
)

// ellipsoid is one term of the phantom: intensity a inside the ellipsoid
// with semi-axes (ax, by, cz) centred at (x0, y0, z0), turned by phi
// degrees about z.
type ellipsoid struct{ a, ax, by, cz, x0, y0, z0, phi float64 }

// sheppLogan3D is Kak and Slaney's 3D Shepp–Logan head with the higher
// contrast intensities of the "modified" 2D phantom, in [-1, 1]³.
var sheppLogan3D = []ellipsoid{
	{1, .69, .92, .81, 0, 0, 0, 0},
	{-.8, .6624, .874, .78, 0, -.0184, 0, 0},
	{-.2, .11, .31, .22, .22, 0, 0, -18},
	{-.2, .16, .41, .28, -.22, 0, 0, 18},
	{.1, .21, .25, .41, 0, .35, -.15, 0},
	{.1, .046, .046, .05, 0, .1, .25, 0},
	{.1, .046, .046, .05, 0, -.1, .25, 0},
	{.1, .046, .023, .05, -.08, -.605, 0, 0},
	{.1, .023, .023, .02, 0, -.606, 0, 0},
	{.1, .023, .046, .02, .06, -.605, 0, 0},
}

// Phantom is a 3D Shepp–Logan phantom of nx×ny×nz voxels (x fastest) in
// Hounsfield-like units: air -1000 outside, skull about +1000, soft tissue
// between, with Gaussian noise of standard deviation noise HU. rng also
// jitters the head's size and position by a few percent, so that phantoms
// of different "patients" differ.
func Phantom(nx, ny, nz int, noise float64, rng *rand.Rand) []float32 {
	s := 1 + 0.06*(rng.Float64()-0.5)
	dx, dy, dz := 0.04*(rng.Float64()-0.5), 0.04*(rng.Float64()-0.5), 0.04*(rng.Float64()-0.5)
	out := make([]float32, nx*ny*nz)
	type prepared struct{ a, x0, y0, z0, cos, sin, ia, ib, ic float64 }
	var es []prepared
	for _, e := range sheppLogan3D {
		p := e.phi * math.Pi / 180
		es = append(es, prepared{e.a, e.x0*s + dx, e.y0*s + dy, e.z0*s + dz, math.Cos(p), math.Sin(p), 1 / (e.ax * s * e.ax * s), 1 / (e.by * s * e.by * s), 1 / (e.cz * s * e.cz * s)})
	}
	i := 0
	for z := range nz {
		pz := 2*(float64(z)+0.5)/float64(nz) - 1
		for y := range ny {
			py := 2*(float64(y)+0.5)/float64(ny) - 1
			for x := range nx {
				px := 2*(float64(x)+0.5)/float64(nx) - 1
				v := 0.0
				for _, e := range es {
					u, w, t := px-e.x0, py-e.y0, pz-e.z0
					u, w = u*e.cos+w*e.sin, -u*e.sin+w*e.cos
					if u*u*e.ia+w*w*e.ib+t*t*e.ic <= 1 {
						v += e.a
					}
				}
				out[i] = float32(2000*v - 1000 + noise*rng.NormFloat64())
				i++
			}
		}
	}
	return out
}

// WritePhantoms writes n noisy phantoms of size (x, y, z) as
// dir/patientNNN.nii.gz with 1 mm voxels and returns their paths.
func WritePhantoms(dir string, n int, size [3]int, noise float64, seed uint64) ([]string, error) {
	var paths []string
	for i := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		var h nifti.Header
		h.Dim = [8]int64{3, int64(size[0]), int64(size[1]), int64(size[2]), 1, 1, 1, 1}
		h.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
		h.Descrip = "synthetic Shepp-Logan phantom"
		h.XYZTUnits = 2 // mm
		h.SformCode = 1
		h.SRowX = [4]float64{1, 0, 0, -float64(size[0]) / 2}
		h.SRowY = [4]float64{0, 1, 0, -float64(size[1]) / 2}
		h.SRowZ = [4]float64{0, 0, 1, -float64(size[2]) / 2}
		p := filepath.Join(dir, fmt.Sprintf("patient%03d.nii.gz", i))
		if err := nifti.Write(p, h, Phantom(size[0], size[1], size[2], noise, rng)); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Problem is one GSM8K record.
type Problem struct {
	Question string `json:"question"`
	Answer   string `json:"answer"`
}

var (
	names = []string{"Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Randy"}
	items = []string{"clips", "apples", "books", "marbles", "stickers", "cookies", "pencils", "shells"}
)

// Arithmetic makes a GSM8K-style word problem: a question, worked steps with
// calculator annotations <<a*b=c>>, and the final "#### n" line.
func Arithmetic(rng *rand.Rand) Problem {
	name, item := names[rng.IntN(len(names))], items[rng.IntN(len(items))]
	a, b, c := 2+rng.IntN(40), 2+rng.IntN(9), 2+rng.IntN(12)
	bc := b * c
	total := a + bc
	q := fmt.Sprintf("%s has %d %s. %s buys %d packs with %d %s in each pack. How many %s does %s have now?", name, a, item, name, b, c, item, item, name)
	ans := fmt.Sprintf("The packs hold %d*%d=<<%d*%d=%d>>%d %s.\n%s has %d+%d=<<%d+%d=%d>>%d %s now.\n#### %d",
		b, c, b, c, bc, bc, item, name, a, bc, a, bc, total, total, item, total)
	if rng.IntN(2) == 0 {
		d := 1 + rng.IntN(total)
		q = q[:len(q)-len(fmt.Sprintf("How many %s does %s have now?", item, name))] +
			fmt.Sprintf("Then %s gives away %d %s. How many %s are left?", name, d, item, item)
		ans = ans[:len(ans)-len(fmt.Sprintf("#### %d", total))] +
			fmt.Sprintf("After giving away %d, %d-%d=<<%d-%d=%d>>%d %s are left.\n#### %d", d, total, d, total, d, total-d, total-d, item, total-d)
	}
	return Problem{Question: q, Answer: ans}
}

// WriteGSM8K writes n problems as JSON lines to path.
func WriteGSM8K(path string, n int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 8))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for range n {
		if err := enc.Encode(Arithmetic(rng)); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
