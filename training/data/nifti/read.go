package nifti

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/ortrain/ortrain/training/safefile"
)

// Error is a file that is not a NIfTI volume this package reads:
// malformed, truncated, corrupt, or of a kind it does not take. It names
// the file (Read and ReadHeader give its absolute path).
type Error struct {
	File string
	Err  error
}

func (e *Error) Error() string { return e.File + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// BadInput marks the error as the user's to fix (exit code 2), unless the
// operating system failed to read the file.
func (e *Error) BadInput() bool {
	var pe *fs.PathError
	return !errors.As(e.Err, &pe)
}

// bad is an *Error naming the file name.
func bad(name, format string, args ...any) error {
	return &Error{File: name, Err: fmt.Errorf(format, args...)}
}

// absolute is path made absolute, for errors that name it.
func absolute(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// Volume is a NIfTI volume: its header and its voxels as float32, x varying
// fastest, with scl_slope and scl_inter applied.
type Volume struct {
	Header Header
	Data   []float32
}

// Read reads a .nii or .nii.gz file (gzip is recognised by content). A
// gzip stream is read to its end, so that its trailer's CRC-32 and size
// are checked against the data inflated.
func Read(path string) (*Volume, error) {
	name := absolute(path)
	f, r, exact, isize, err := open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Deflate inflates at most ~1032:1: a gzip file of this size cannot
	// hold more, whatever its header and trailer say.
	limit := int64(-1)
	if exact < 0 {
		limit = st.Size()*1032 + 1<<16
	}
	v, err := decode(name, r, exact, isize, limit)
	if err == nil && exact < 0 {
		// The gzip stream must end with the voxels: reading one byte past
		// them makes gzip.Reader check the member's trailer (CRC-32 and
		// size) and look for another member. Anything more is refused
		// rather than inflated, however much there is: a header that
		// describes less than the file holds is wrong about the volume.
		switch _, err := r.ReadByte(); {
		case err == nil:
			return nil, bad(name, "more data follows the volume its header describes (%s %s, %s): the header's dimensions or datatype do not match the data, or something was appended to the file", v.Header.dims(), v.Header.Datatype, mb(v.Header.Voxels()*int64(v.Header.Datatype.Size())))
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, bad(name, "truncated: the gzip stream ends before its trailer")
		case err != io.EOF:
			return nil, &Error{File: name, Err: err}
		}
	}
	return v, err
}

// ReadHeader reads only the header of a .nii or .nii.gz file: what planning
// patches needs, without inflating the data.
func ReadHeader(path string) (Header, error) {
	name := absolute(path)
	f, r, _, _, err := open(name)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	return readHeader(name, r)
}

// Decode reads a NIfTI stream (already inflated); name is used in errors.
func Decode(name string, r io.Reader) (*Volume, error) {
	return decode(name, bufio.NewReader(r), -1, -1, -1)
}

// open opens path and, for gzip, an inflating reader. exact is the number
// of bytes a plain file holds; isize is a gzip file's trailer, the inflated
// size modulo 2^32, a hint only. Each is -1 when not known.
func open(path string) (f *os.File, r *bufio.Reader, exact, isize int64, err error) {
	f, err = safefile.Open(path)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, 0, 0, err
	}
	size := st.Size()
	br := bufio.NewReaderSize(f, 1<<16)
	if m, _ := br.Peek(2); len(m) < 2 || m[0] != 0x1f || m[1] != 0x8b {
		return f, br, size, -1, nil
	}
	isize = -1
	if size >= 18 {
		var tail [4]byte
		if _, err := f.ReadAt(tail[:], size-4); err == nil {
			isize = int64(binary.LittleEndian.Uint32(tail[:]))
		}
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		f.Close()
		return nil, nil, 0, 0, bad(path, "gzip: %w", err)
	}
	return f, bufio.NewReaderSize(zr, 1<<16), -1, isize, nil
}

// readHeader reads a header of either version from r.
func readHeader(name string, r io.Reader) (Header, error) {
	b := make([]byte, size2)
	n, err := io.ReadFull(r, b[:size1])
	if err != nil {
		return Header{}, streamErr(name, err, fmt.Sprintf("%d bytes, too short for a NIfTI header", n))
	}
	h, more, err := parseHeader(name, b[:size1])
	if err != nil || more == 0 {
		return h, err
	}
	if n, err := io.ReadFull(r, b[size1:]); err != nil {
		return Header{}, streamErr(name, err, fmt.Sprintf("%d bytes, the NIfTI-2 header needs 540", size1+n))
	}
	h, _, err = parseHeader(name, b)
	return h, err
}

// streamErr names a short read as truncation and passes others on.
func streamErr(name string, err error, short string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return bad(name, "truncated: %s", short)
	}
	return &Error{File: name, Err: err}
}

// decode reads header and data; exact and isize are as open returns them,
// limit the most inflated bytes the source can hold (-1: unknown).
func decode(name string, r *bufio.Reader, exact, isize, limit int64) (*Volume, error) {
	h, err := readHeader(name, r)
	if err != nil {
		return nil, err
	}
	vox := h.Voxels()
	esize := int64(h.Datatype.Size())
	need := vox * esize
	skip := h.VoxOffset - headerSize(h.Version)
	if exact >= 0 && exact < h.VoxOffset {
		return nil, bad(name, "truncated: vox_offset is %d but the file ends at %d", h.VoxOffset, exact)
	}
	if exact >= 0 && exact < h.VoxOffset+need {
		return nil, truncated(name, &h, exact-h.VoxOffset)
	}
	if n, err := r.Discard(int(skip)); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, bad(name, "truncated: vox_offset is %d but the file ends at %d", h.VoxOffset, headerSize(h.Version)+int64(n))
		}
		return nil, &Error{File: name, Err: err}
	}
	// Allocate all at once when the size is known, or the gzip trailer
	// agrees with the header and the compressed size can hold that much;
	// otherwise grow with the data, so that a header claiming gigabytes in
	// a short file fails (truncated) before it allocates them.
	prealloc := min(vox, 1<<20)
	if exact >= 0 || isize == (h.VoxOffset+need)&0xffffffff && (limit < 0 || h.VoxOffset+need <= limit) {
		prealloc = vox
	}
	data := make([]float32, 0, prealloc)
	buf := make([]byte, 1<<16)
	var bo binary.ByteOrder = binary.LittleEndian
	if h.BigEndian {
		bo = binary.BigEndian
	}
	for got := int64(0); got < need; {
		chunk := buf[:min(int64(len(buf)), need-got)]
		n, err := io.ReadFull(r, chunk)
		n -= n % int(esize)
		data = convert(data, chunk[:n], h.Datatype, bo)
		got += int64(n)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, truncated(name, &h, got)
			}
			return nil, &Error{File: name, Err: err}
		}
	}
	scale(data, h.SclSlope, h.SclInter)
	return &Volume{Header: h, Data: data}, nil
}

func truncated(name string, h *Header, held int64) error {
	need := h.Voxels() * int64(h.Datatype.Size())
	return bad(name, "truncated: header says %s %s (%s) but file holds %s", h.dims(), h.Datatype, mb(need), mb(held))
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// scale applies scl_slope and scl_inter; a slope of 0 or not finite means
// no scaling, as the standard says.
func scale(data []float32, slope, inter float64) {
	if slope == 0 || math.IsNaN(slope) || math.IsInf(slope, 0) || (slope == 1 && inter == 0) {
		return
	}
	if math.IsNaN(inter) || math.IsInf(inter, 0) {
		inter = 0
	}
	s, o := float32(slope), float32(inter)
	for i, v := range data {
		data[i] = v*s + o
	}
}

// convert appends the voxels of raw, whose length is a multiple of the
// datatype's size, to dst as float32.
func convert(dst []float32, raw []byte, dt Datatype, bo binary.ByteOrder) []float32 {
	switch dt {
	case Uint8:
		for _, v := range raw {
			dst = append(dst, float32(v))
		}
	case Int8:
		for _, v := range raw {
			dst = append(dst, float32(int8(v)))
		}
	case Int16:
		for i := 0; i < len(raw); i += 2 {
			dst = append(dst, float32(int16(bo.Uint16(raw[i:]))))
		}
	case Uint16:
		for i := 0; i < len(raw); i += 2 {
			dst = append(dst, float32(bo.Uint16(raw[i:])))
		}
	case Int32:
		for i := 0; i < len(raw); i += 4 {
			dst = append(dst, float32(int32(bo.Uint32(raw[i:]))))
		}
	case Uint32:
		for i := 0; i < len(raw); i += 4 {
			dst = append(dst, float32(bo.Uint32(raw[i:])))
		}
	case Float32:
		for i := 0; i < len(raw); i += 4 {
			dst = append(dst, math.Float32frombits(bo.Uint32(raw[i:])))
		}
	case Float64:
		for i := 0; i < len(raw); i += 8 {
			dst = append(dst, float32(math.Float64frombits(bo.Uint64(raw[i:]))))
		}
	case Int64:
		for i := 0; i < len(raw); i += 8 {
			dst = append(dst, float32(int64(bo.Uint64(raw[i:]))))
		}
	case Uint64:
		for i := 0; i < len(raw); i += 8 {
			dst = append(dst, float32(bo.Uint64(raw[i:])))
		}
	}
	return dst
}
