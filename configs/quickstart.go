package configs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

// MRIDir is where Debian's mricron-data package puts its MRI templates.
const MRIDir = "/usr/share/mricron/templates"

// quickstartMRI are the real volumes the quickstart adds when mricron-data
// is installed: the brain-extracted Colin 27 trains, the whole head
// validates.
var quickstartMRI = []struct{ file, split string }{
	{"ch2bet.nii.gz", "train"},
	{"ch2.nii.gz", "val"},
}

// PrepareQuickstart writes the quickstart's volumes under train and val:
// noisy 3D phantoms (8 to train, 1 to validate, 64×64×48 voxels), and, when
// Debian's mricron-data is installed, two real T1 MRI volumes averaged down
// to 2 mm so that the CPU can reconstruct them whole in seconds. Files
// already there are kept, so a second run reuses them. It reports which
// real volumes it added.
func PrepareQuickstart(train, val string) (real []string, err error) {
	for _, d := range []string{train, val} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := writePhantoms(train, 8, 1); err != nil {
		return nil, err
	}
	if err := writePhantoms(val, 1, 2); err != nil {
		return nil, err
	}
	for _, m := range quickstartMRI {
		src := filepath.Join(MRIDir, m.file)
		dir := map[string]string{"train": train, "val": val}[m.split]
		dst := filepath.Join(dir, "mri-"+m.file)
		if _, err := os.Stat(dst); err == nil {
			real = append(real, dst)
			continue
		}
		v, err := nifti.Read(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // mricron-data not installed: phantoms only
		}
		if err != nil {
			return nil, err
		}
		h, data, err := halve(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		if err := nifti.Write(dst, h, data); err != nil {
			return nil, err
		}
		real = append(real, dst)
	}
	return real, nil
}

func writePhantoms(dir string, n int, seed uint64) error {
	if m, _ := filepath.Glob(filepath.Join(dir, "patient*.nii.gz")); len(m) >= n {
		return nil
	}
	_, err := synthetic.WritePhantoms(dir, n, [3]int{64, 64, 48}, 0.02, seed)
	return err
}

// halve averages 2×2×2 blocks of a 3-D volume: half the size, twice the
// voxel spacing, same physical extent and origin.
func halve(v *nifti.Volume) (nifti.Header, []float32, error) {
	h := v.Header
	s := h.Shape()
	if h.Dim[0] < 3 || len(s) < 3 || h.Voxels() != int64(s[0]*s[1]*s[2]) {
		return h, nil, fmt.Errorf("want a 3-D volume, have dimensions %v", s)
	}
	nx, ny, nz := s[0]/2, s[1]/2, s[2]/2
	out := make([]float32, nx*ny*nz)
	for z := range nz {
		for y := range ny {
			for x := range nx {
				var sum float32
				for dz := range 2 {
					for dy := range 2 {
						for dx := range 2 {
							sum += v.Data[((2*z+dz)*s[1]+2*y+dy)*s[0]+2*x+dx]
						}
					}
				}
				out[(z*ny+y)*nx+x] = sum / 8
			}
		}
	}
	h.Dim[1], h.Dim[2], h.Dim[3] = int64(nx), int64(ny), int64(nz)
	for i := 1; i <= 3; i++ {
		h.PixDim[i] *= 2
	}
	// The new voxel 0 is centred where old voxels 0 and 1 meet: half an old
	// voxel along each axis, the sum of the sform's columns halved. The
	// qform describes the same transform, so its offset moves alike.
	rows := []*[4]float64{&h.SRowX, &h.SRowY, &h.SRowZ}
	offsets := []*float64{&h.QOffsetX, &h.QOffsetY, &h.QOffsetZ}
	for r, row := range rows {
		shift := (row[0] + row[1] + row[2]) / 2
		if h.SformCode > 0 {
			*offsets[r] += shift
		}
		row[3] += shift
		for i := range 3 { // the columns are the voxel axes
			row[i] *= 2
		}
	}
	return h, out, nil
}
