package nifti

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Write writes data as a float32 volume with h's geometry (dimensions,
// voxel sizes, qform and sform, units, description) to path, gzipped when
// path ends in ".gz" (any case). The datatype becomes float32 with no scaling, since
// data is already in physical units. It writes NIfTI-2 when h.Version is 2
// or a dimension does not fit NIfTI-1, and replaces path atomically.
func Write(path string, h Header, data []float32) error {
	name := filepath.Base(path)
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+name+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<16)
	var w io.Writer = bw
	var zw *gzip.Writer
	if strings.HasSuffix(strings.ToLower(path), ".gz") {
		zw = gzip.NewWriter(bw)
		w = zw
	}
	err = Encode(name, w, h, data)
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return os.Rename(tmp.Name(), path)
}

// Encode writes a .nii stream as Write does, without compression; name is
// used in errors.
func Encode(name string, w io.Writer, h Header, data []float32) error {
	h.Datatype, h.BitPix, h.SclSlope, h.SclInter, h.BigEndian = Float32, 32, 1, 0, false
	if h.Version != 2 {
		h.Version = 1
		for _, d := range h.Dim {
			if d > math.MaxInt16 {
				h.Version = 2
			}
		}
	}
	h.VoxOffset = headerSize(h.Version) + 4
	if err := h.check(name); err != nil {
		return err
	}
	if int64(len(data)) != h.Voxels() {
		return fmt.Errorf("%s: %d values for a %s volume of %d voxels", name, len(data), h.dims(), h.Voxels())
	}
	hdr := make([]byte, h.VoxOffset) // the 4 bytes after the header: no extensions
	if h.Version == 1 {
		putHeader1(hdr, &h)
	} else {
		putHeader2(hdr, &h)
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	buf := make([]byte, 0, 1<<16)
	for len(data) > 0 {
		n := min(len(data), cap(buf)/4)
		buf = buf[:0]
		for _, v := range data[:n] {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func putHeader1(b []byte, h *Header) {
	le := binary.LittleEndian
	i16 := func(o int, v int64) { le.PutUint16(b[o:], uint16(int16(v))) }
	f32 := func(o int, v float64) { le.PutUint32(b[o:], math.Float32bits(float32(v))) }
	le.PutUint32(b, size1)
	b[38] = 'r' // "regular", as every writer sets it
	b[39] = h.DimInfo
	for i := range 8 {
		i16(40+2*i, h.Dim[i])
		f32(76+4*i, h.PixDim[i])
	}
	f32(56, h.IntentP[0])
	f32(60, h.IntentP[1])
	f32(64, h.IntentP[2])
	i16(68, int64(h.IntentCode))
	i16(70, int64(h.Datatype))
	i16(72, int64(h.BitPix))
	i16(74, h.SliceStart)
	f32(108, float64(h.VoxOffset))
	f32(112, h.SclSlope)
	f32(116, h.SclInter)
	i16(120, h.SliceEnd)
	b[122] = byte(h.SliceCode)
	b[123] = byte(h.XYZTUnits)
	f32(124, h.CalMax)
	f32(128, h.CalMin)
	f32(132, h.SliceDuration)
	f32(136, h.TOffset)
	copy(b[148:228], h.Descrip)
	copy(b[228:252], h.AuxFile)
	i16(252, int64(h.QformCode))
	i16(254, int64(h.SformCode))
	for i, v := range []float64{h.QuaternB, h.QuaternC, h.QuaternD, h.QOffsetX, h.QOffsetY, h.QOffsetZ} {
		f32(256+4*i, v)
	}
	for i := range 4 {
		f32(280+4*i, h.SRowX[i])
		f32(296+4*i, h.SRowY[i])
		f32(312+4*i, h.SRowZ[i])
	}
	copy(b[328:344], h.IntentName)
	copy(b[344:348], magic1)
}

func putHeader2(b []byte, h *Header) {
	le := binary.LittleEndian
	i64 := func(o int, v int64) { le.PutUint64(b[o:], uint64(v)) }
	f64 := func(o int, v float64) { le.PutUint64(b[o:], math.Float64bits(v)) }
	le.PutUint32(b, size2)
	copy(b[4:12], magic2)
	le.PutUint16(b[12:], uint16(h.Datatype))
	le.PutUint16(b[14:], uint16(h.BitPix))
	for i := range 8 {
		i64(16+8*i, h.Dim[i])
		f64(104+8*i, h.PixDim[i])
	}
	f64(80, h.IntentP[0])
	f64(88, h.IntentP[1])
	f64(96, h.IntentP[2])
	i64(168, h.VoxOffset)
	f64(176, h.SclSlope)
	f64(184, h.SclInter)
	f64(192, h.CalMax)
	f64(200, h.CalMin)
	f64(208, h.SliceDuration)
	f64(216, h.TOffset)
	i64(224, h.SliceStart)
	i64(232, h.SliceEnd)
	copy(b[240:320], h.Descrip)
	copy(b[320:344], h.AuxFile)
	le.PutUint32(b[344:], uint32(int32(h.QformCode)))
	le.PutUint32(b[348:], uint32(int32(h.SformCode)))
	for i, v := range []float64{h.QuaternB, h.QuaternC, h.QuaternD, h.QOffsetX, h.QOffsetY, h.QOffsetZ} {
		f64(352+8*i, v)
	}
	for i := range 4 {
		f64(400+8*i, h.SRowX[i])
		f64(432+8*i, h.SRowY[i])
		f64(464+8*i, h.SRowZ[i])
	}
	le.PutUint32(b[496:], uint32(int32(h.SliceCode)))
	le.PutUint32(b[500:], uint32(int32(h.XYZTUnits)))
	le.PutUint32(b[504:], uint32(int32(h.IntentCode)))
	copy(b[508:524], h.IntentName)
	b[524] = h.DimInfo
}
