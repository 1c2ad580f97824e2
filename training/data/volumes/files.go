package volumes

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/data/npy"
)

// The volume files ortrain reads: NIfTI (.nii, .nii.gz), and NumPy arrays
// (.npy, as medicaldiffusion's LIDC preprocessing saves them). Both come
// back as NIfTI volumes; an array has no geometry, so it gets 1 mm voxels
// and no orientation.
var extensions = []string{".nii.gz", ".nii", ".npy"}

// IsVolume reports whether path names a volume file ortrain reads. The
// extension's case does not matter (B.NII.GZ, as some exports name them).
func IsVolume(path string) bool {
	return extension(path) != ""
}

// extension is path's volume extension as written, or "".
func extension(path string) string {
	lower := strings.ToLower(path)
	for _, ext := range extensions {
		if strings.HasSuffix(lower, ext) {
			return path[len(path)-len(ext):]
		}
	}
	return ""
}

// isArray reports whether path names a NumPy array (.npy, any case).
func isArray(path string) bool { return strings.EqualFold(extension(path), ".npy") }

// Name is the file's name without its volume extension: the patient's
// name in a one-file-per-patient dataset.
func Name(path string) string {
	base := filepath.Base(path)
	return base[:len(base)-len(extension(base))]
}

// ID is how metrics and reports name a volume found under the data folder
// root: its path relative to root without the volume extension
// ("case_00000/imaging"), so that the files of a one-folder-per-patient
// dataset, which often share a name (KiTS's imaging.nii.gz), stay apart.
// A path not under root, or root "", gives Name.
func ID(root, path string) string {
	rel, ok := relative(root, path)
	if !ok {
		return Name(path)
	}
	return filepath.ToSlash(rel[:len(rel)-len(extension(rel))])
}

// Patient is the patient a volume found under the data folder root belongs
// to: the first entry of its path under root, which is the patient's
// folder in a one-folder-per-patient dataset (KiTS's
// case_00000/imaging.nii.gz, LIDC's nested series folders), or the file
// itself, without its extension, at root's top level (one file per
// patient). A path not under root, or root "", gives Name.
func Patient(root, path string) string {
	rel, ok := relative(root, path)
	if !ok {
		return Name(path)
	}
	if top, _, nested := strings.Cut(rel, string(filepath.Separator)); nested {
		return top
	}
	return Name(rel)
}

// relative is path relative to root, when root is set and holds path.
func relative(root, path string) (string, bool) {
	if root == "" {
		return "", false
	}
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return rel, true
}

// ReadHeader reads a volume file's header.
func ReadHeader(path string) (nifti.Header, error) {
	if !isArray(path) {
		return nifti.ReadHeader(path)
	}
	h, err := npy.ReadHeader(path)
	if err != nil {
		return nifti.Header{}, err
	}
	return arrayHeader(path, h)
}

// Read reads a volume file as float32 voxels, x fastest. A volume with NaN
// or infinite voxels is refused (NonFiniteError): no intensity window
// maps them to a number, and one of them poisons every patch, loss and
// metric it reaches.
func Read(path string) (*nifti.Volume, error) {
	var v *nifti.Volume
	if !isArray(path) {
		var err error
		if v, err = nifti.Read(path); err != nil {
			return nil, err
		}
	} else {
		h, data, err := npy.Read(path)
		if err != nil {
			return nil, err
		}
		nh, err := arrayHeader(path, h)
		if err != nil {
			return nil, err
		}
		v = &nifti.Volume{Header: nh, Data: data}
	}
	if err := checkFinite(path, v.Data); err != nil {
		return nil, err
	}
	return v, nil
}

// NonFiniteError is a volume file holding NaN or infinite voxels (after
// scl_slope and scl_inter, or float32 conversion, where either can
// overflow). It is the user's to fix (exit code 2).
type NonFiniteError struct {
	File                string // absolute
	NaN, PosInf, NegInf int64
}

func (e *NonFiniteError) Error() string {
	var kinds []string
	for _, k := range []struct {
		n    int64
		what string
	}{{e.NaN, "NaN"}, {e.PosInf, "+Inf"}, {e.NegInf, "-Inf"}} {
		if k.n > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s", k.n, k.what))
		}
	}
	n := e.NaN + e.PosInf + e.NegInf
	verb := "voxels are"
	if n == 1 {
		verb = "voxel is"
	}
	return fmt.Sprintf("%s: %d %s not finite (%s)", e.File, n, verb, strings.Join(kinds, ", "))
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *NonFiniteError) BadInput() bool { return true }

// checkFinite refuses data holding NaN or ±Inf. x-x is 0 for every finite
// x and NaN otherwise, so the common case costs one subtraction and one
// well-predicted branch a voxel, a few percent of inflating the file.
func checkFinite(path string, data []float32) error {
	var bad bool
	for _, x := range data {
		if x-x != 0 {
			bad = true
			break
		}
	}
	if !bad {
		return nil
	}
	e := &NonFiniteError{File: path}
	if abs, err := filepath.Abs(path); err == nil {
		e.File = abs
	}
	for _, x := range data {
		switch {
		case x != x:
			e.NaN++
		case math.IsInf(float64(x), 1):
			e.PosInf++
		case math.IsInf(float64(x), -1):
			e.NegInf++
		}
	}
	return e
}

// Write writes a volume: NumPy's format (z, y, x in C order, as it would
// have been read) for a path ending in .npy (any case), else NIfTI with
// h's geometry.
func Write(path string, h nifti.Header, data []float32) error {
	if isArray(path) {
		return npy.Write(path, []int{int(h.Dim[3]), int(h.Dim[2]), int(h.Dim[1])}, data)
	}
	return nifti.Write(path, h, data)
}

// arrayHeader gives a 3-D array the NIfTI header of the volume it holds.
// Axes of size 1 (a channel axis) are dropped, which leaves the data as it
// is. The array is indexed [z, y, x] by its shape as NumPy reports it,
// whatever its memory order (npy.Read returns Fortran-order data in C
// order), so the last axis, which varies fastest, is x.
func arrayHeader(path string, h npy.Header) (nifti.Header, error) {
	shape := slices.Clone(h.Shape)
	for i := 0; i < len(shape) && len(shape) > 3; {
		if shape[i] == 1 {
			shape = slices.Delete(shape, i, i+1)
		} else {
			i++
		}
	}
	if len(shape) != 3 {
		abs, _ := filepath.Abs(path)
		return nifti.Header{}, &npy.Error{File: abs, Msg: fmt.Sprintf("a %d-D array %v; ortrain reads 3-D volumes (axes of size 1 aside)", len(h.Shape), h.Shape)}
	}
	slices.Reverse(shape)
	var nh nifti.Header
	nh.Version = 1
	nh.Dim = [8]int64{3, int64(shape[0]), int64(shape[1]), int64(shape[2]), 1, 1, 1, 1}
	nh.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	nh.Datatype, nh.BitPix = nifti.Float32, 32
	nh.Descrip = "from " + filepath.Base(path)
	return nh, nil
}
