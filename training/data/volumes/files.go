package volumes

import (
	"fmt"
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

// IsVolume reports whether path names a volume file ortrain reads.
func IsVolume(path string) bool {
	return slices.ContainsFunc(extensions, func(ext string) bool { return strings.HasSuffix(path, ext) })
}

// Name is the file's name without its volume extension: the patient's
// name in a one-file-per-patient dataset, and the name reports use.
func Name(path string) string {
	base := filepath.Base(path)
	for _, ext := range extensions {
		if s, ok := strings.CutSuffix(base, ext); ok {
			return s
		}
	}
	return base
}

// ReadHeader reads a volume file's header.
func ReadHeader(path string) (nifti.Header, error) {
	if !strings.HasSuffix(path, ".npy") {
		return nifti.ReadHeader(path)
	}
	h, err := npy.ReadHeader(path)
	if err != nil {
		return nifti.Header{}, err
	}
	return arrayHeader(path, h)
}

// Read reads a volume file as float32 voxels, x fastest.
func Read(path string) (*nifti.Volume, error) {
	if !strings.HasSuffix(path, ".npy") {
		return nifti.Read(path)
	}
	h, data, err := npy.Read(path)
	if err != nil {
		return nil, err
	}
	nh, err := arrayHeader(path, h)
	if err != nil {
		return nil, err
	}
	return &nifti.Volume{Header: nh, Data: data}, nil
}

// Write writes a volume: NumPy's format (z, y, x in C order, as it would
// have been read) for a path ending in .npy, else NIfTI with h's geometry.
func Write(path string, h nifti.Header, data []float32) error {
	if strings.HasSuffix(path, ".npy") {
		return npy.Write(path, []int{int(h.Dim[3]), int(h.Dim[2]), int(h.Dim[1])}, data)
	}
	return nifti.Write(path, h, data)
}

// arrayHeader gives a 3-D array the NIfTI header of the volume it holds.
// Axes of size 1 (a channel axis) are dropped, which leaves the memory
// layout as it is. The fastest-varying axis becomes x: the last in C
// order (an array indexed [z, y, x], NumPy's default), the first in
// Fortran order.
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
	if !h.FortranOrder {
		slices.Reverse(shape)
	}
	var nh nifti.Header
	nh.Version = 1
	nh.Dim = [8]int64{3, int64(shape[0]), int64(shape[1]), int64(shape[2]), 1, 1, 1, 1}
	nh.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	nh.Datatype, nh.BitPix = nifti.Float32, 32
	nh.Descrip = "from " + filepath.Base(path)
	return nh, nil
}
