// Package nifti reads and writes NIfTI-1 and NIfTI-2 volumes (.nii and
// .nii.gz): the header with its geometry, and the voxels as float32 with
// scl_slope/scl_inter applied. Malformed input is an *Error naming the file
// (by its absolute path when read from one), never a panic.
package nifti

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// Datatype is a NIfTI datatype code.
type Datatype int16

// The datatypes Read converts to float32.
const (
	Uint8   Datatype = 2
	Int16   Datatype = 4
	Int32   Datatype = 8
	Float32 Datatype = 16
	Float64 Datatype = 64
	Int8    Datatype = 256
	Uint16  Datatype = 512
	Uint32  Datatype = 768
	Int64   Datatype = 1024
	Uint64  Datatype = 1280
)

// Size is the size in bytes of one voxel of d, or 0 for a datatype this
// package does not read.
func (d Datatype) Size() int {
	switch d {
	case Uint8, Int8:
		return 1
	case Int16, Uint16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// String names d as the NIfTI standard does.
func (d Datatype) String() string {
	switch d {
	case Uint8:
		return "uint8"
	case Int16:
		return "int16"
	case Int32:
		return "int32"
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int8:
		return "int8"
	case Uint16:
		return "uint16"
	case Uint32:
		return "uint32"
	case Int64:
		return "int64"
	case Uint64:
		return "uint64"
	}
	return fmt.Sprintf("datatype %d", int16(d))
}

// Header is a NIfTI-1 or NIfTI-2 header in NIfTI-2's wider types. Fields
// keep the standard's names; Dim[0] is the number of dimensions and Dim[1],
// Dim[2], Dim[3] are x, y, z (x varies fastest in the data).
type Header struct {
	// Version is 1 or 2.
	Version int
	// BigEndian records the byte order of the file read.
	BigEndian bool

	Dim        [8]int64
	PixDim     [8]float64
	Datatype   Datatype
	BitPix     int
	VoxOffset  int64
	SclSlope   float64
	SclInter   float64
	IntentCode int
	IntentP    [3]float64
	IntentName string

	DimInfo       uint8
	SliceStart    int64
	SliceEnd      int64
	SliceCode     int
	SliceDuration float64
	TOffset       float64
	XYZTUnits     int
	CalMax        float64
	CalMin        float64
	Descrip       string
	AuxFile       string

	// Orientation: the qform (quaternion) and sform (affine rows) of the
	// voxel-to-world transform, each valid when its code is > 0.
	QformCode int
	SformCode int
	QuaternB  float64
	QuaternC  float64
	QuaternD  float64
	QOffsetX  float64
	QOffsetY  float64
	QOffsetZ  float64
	SRowX     [4]float64
	SRowY     [4]float64
	SRowZ     [4]float64
}

// Shape is the size of each dimension, x first.
func (h *Header) Shape() []int {
	n := max(0, min(int(h.Dim[0]), 7))
	s := make([]int, n)
	for i := range s {
		s[i] = int(h.Dim[i+1])
	}
	return s
}

// Voxels is the number of voxels.
func (h *Header) Voxels() int64 {
	n := int64(1)
	for _, d := range h.Shape() {
		n *= int64(d)
	}
	return n
}

// Affine is the voxel-to-world transform: the sform when its code is set,
// else the qform, else the pixdim scaling (method 1 of the standard).
func (h *Header) Affine() [4][4]float64 {
	var a [4][4]float64
	a[3][3] = 1
	switch {
	case h.SformCode > 0:
		a[0], a[1], a[2] = h.SRowX, h.SRowY, h.SRowZ
	case h.QformCode > 0:
		b, c, d := h.QuaternB, h.QuaternC, h.QuaternD
		aa := math.Sqrt(max(0, 1-(b*b+c*c+d*d)))
		qfac := 1.0
		if h.PixDim[0] < 0 {
			qfac = -1
		}
		r := [3][3]float64{
			{aa*aa + b*b - c*c - d*d, 2 * (b*c - aa*d), 2 * (b*d + aa*c)},
			{2 * (b*c + aa*d), aa*aa + c*c - b*b - d*d, 2 * (c*d - aa*b)},
			{2 * (b*d - aa*c), 2 * (c*d + aa*b), aa*aa + d*d - c*c - b*b},
		}
		scale := [3]float64{h.PixDim[1], h.PixDim[2], h.PixDim[3] * qfac}
		off := [3]float64{h.QOffsetX, h.QOffsetY, h.QOffsetZ}
		for i := range 3 {
			for j := range 3 {
				a[i][j] = r[i][j] * scale[j]
			}
			a[i][3] = off[i]
		}
	default:
		for i := range 3 {
			a[i][i] = h.PixDim[i+1]
		}
	}
	return a
}

// Header sizes and magics of the two versions.
const (
	size1  = 348
	size2  = 540
	magic1 = "n+1\x00"
	magic2 = "n+2\x00\r\n\x1a\n"
)

// parseHeader decodes the first size1 or size2 bytes of a file; more reports
// how many bytes beyond b a NIfTI-2 header needs.
func parseHeader(name string, b []byte) (h Header, more int, err error) {
	if len(b) < 4 {
		return h, 0, bad(name, "truncated: %d bytes, too short for a NIfTI header", len(b))
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch {
	case bo.Uint32(b) == size1 || bo.Uint32(b) == size2:
	case binary.BigEndian.Uint32(b) == size1 || binary.BigEndian.Uint32(b) == size2:
		bo, h.BigEndian = binary.BigEndian, true
	default:
		return h, 0, bad(name, "not NIfTI: sizeof_hdr is %d, want 348 (NIfTI-1) or 540 (NIfTI-2)", bo.Uint32(b))
	}
	want := int(bo.Uint32(b))
	if len(b) < want {
		if want == size2 && len(b) >= size1 {
			return h, size2 - len(b), nil
		}
		return h, 0, bad(name, "truncated: %d bytes, the header needs %d", len(b), want)
	}
	i16 := func(o int) int64 { return int64(int16(bo.Uint16(b[o:]))) }
	i32 := func(o int) int64 { return int64(int32(bo.Uint32(b[o:]))) }
	f32 := func(o int) float64 { return float64(math.Float32frombits(bo.Uint32(b[o:]))) }
	f64 := func(o int) float64 { return math.Float64frombits(bo.Uint64(b[o:])) }
	str := func(o, n int) string { return strings.TrimRight(string(b[o:o+n]), "\x00") }
	if want == size1 {
		h.Version = 1
		switch m := string(b[344:348]); m {
		case magic1:
		case "ni1\x00":
			return h, 0, bad(name, "a .hdr/.img pair (magic ni1); only single-file .nii is supported")
		default:
			return h, 0, bad(name, "not NIfTI-1: magic %q, want \"n+1\"", m)
		}
		h.DimInfo = b[39]
		for i := range 8 {
			h.Dim[i] = i16(40 + 2*i)
			h.PixDim[i] = f32(76 + 4*i)
		}
		h.IntentP = [3]float64{f32(56), f32(60), f32(64)}
		h.IntentCode = int(i16(68))
		h.Datatype = Datatype(i16(70))
		h.BitPix = int(i16(72))
		h.SliceStart = i16(74)
		vox := f32(108)
		if !(vox >= 0 && vox < 1<<31) {
			return h, 0, bad(name, "vox_offset %v is not a file offset", vox)
		}
		h.VoxOffset = int64(vox)
		h.SclSlope, h.SclInter = f32(112), f32(116)
		h.SliceEnd = i16(120)
		h.SliceCode = int(b[122])
		h.XYZTUnits = int(b[123])
		h.CalMax, h.CalMin = f32(124), f32(128)
		h.SliceDuration, h.TOffset = f32(132), f32(136)
		h.Descrip, h.AuxFile = str(148, 80), str(228, 24)
		h.QformCode, h.SformCode = int(i16(252)), int(i16(254))
		h.QuaternB, h.QuaternC, h.QuaternD = f32(256), f32(260), f32(264)
		h.QOffsetX, h.QOffsetY, h.QOffsetZ = f32(268), f32(272), f32(276)
		for i := range 4 {
			h.SRowX[i], h.SRowY[i], h.SRowZ[i] = f32(280+4*i), f32(296+4*i), f32(312+4*i)
		}
		h.IntentName = str(328, 16)
	} else {
		h.Version = 2
		if m := string(b[4:12]); m != magic2 {
			return h, 0, bad(name, "not NIfTI-2: magic %q, want \"n+2\"", m)
		}
		i64 := func(o int) int64 { return int64(bo.Uint64(b[o:])) }
		h.Datatype = Datatype(i16(12))
		h.BitPix = int(i16(14))
		for i := range 8 {
			h.Dim[i] = i64(16 + 8*i)
			h.PixDim[i] = f64(104 + 8*i)
		}
		h.IntentP = [3]float64{f64(80), f64(88), f64(96)}
		h.VoxOffset = i64(168)
		h.SclSlope, h.SclInter = f64(176), f64(184)
		h.CalMax, h.CalMin = f64(192), f64(200)
		h.SliceDuration, h.TOffset = f64(208), f64(216)
		h.SliceStart, h.SliceEnd = i64(224), i64(232)
		h.Descrip, h.AuxFile = str(240, 80), str(320, 24)
		h.QformCode, h.SformCode = int(i32(344)), int(i32(348))
		h.QuaternB, h.QuaternC, h.QuaternD = f64(352), f64(360), f64(368)
		h.QOffsetX, h.QOffsetY, h.QOffsetZ = f64(376), f64(384), f64(392)
		for i := range 4 {
			h.SRowX[i], h.SRowY[i], h.SRowZ[i] = f64(400+8*i), f64(432+8*i), f64(464+8*i)
		}
		h.SliceCode = int(i32(496))
		h.XYZTUnits = int(i32(500))
		h.IntentCode = int(i32(504))
		h.IntentName = str(508, 16)
		h.DimInfo = b[524]
	}
	return h, 0, h.check(name)
}

// maxVoxels bounds what a header may claim (2^34 voxels, 64 GiB of
// float32), so that a corrupt one fails instead of overflowing.
const maxVoxels = 1 << 34

// check rejects headers whose data cannot be read.
func (h *Header) check(name string) error {
	if h.Dim[0] < 1 || h.Dim[0] > 7 {
		return bad(name, "dim[0] is %d, want 1 to 7", h.Dim[0])
	}
	n := int64(1)
	for i := 1; i <= int(h.Dim[0]); i++ {
		if h.Dim[i] < 1 || h.Dim[i] > maxVoxels {
			return bad(name, "dim[%d] is %d", i, h.Dim[i])
		}
		// Compared before multiplying: two dimensions under the bound can
		// overflow int64 together.
		if h.Dim[i] > maxVoxels/n {
			return bad(name, "%s voxels is more than this reader takes (%d)", h.dims(), int64(maxVoxels))
		}
		n *= h.Dim[i]
	}
	if h.Datatype.Size() == 0 {
		return bad(name, "unsupported datatype %d", int16(h.Datatype))
	}
	if h.BitPix != 8*h.Datatype.Size() {
		return bad(name, "bitpix %d does not match datatype %s", h.BitPix, h.Datatype)
	}
	if min := headerSize(h.Version) + 4; h.VoxOffset < min {
		return bad(name, "vox_offset %d is inside the header (< %d)", h.VoxOffset, min)
	}
	return nil
}

// dims writes the shape as 181×217×181.
func (h *Header) dims() string {
	var s []string
	for _, d := range h.Shape() {
		s = append(s, fmt.Sprint(d))
	}
	return strings.Join(s, "×")
}

func headerSize(version int) int64 {
	if version == 2 {
		return size2
	}
	return size1
}
