package safetensors

import (
	"encoding/binary"
	"fmt"

	"github.com/ortrain/ortrain/dtype"
)

// NonFinite counts the NaN and the infinite elements of the named tensor,
// reading it in pieces of a few MiB; tensors of integer or boolean types
// have none. Weights loaded from a file are checked with it before they
// are trained from: one NaN reaches every loss.
func (sf *File) NonFinite(name string) (nan, inf int64, err error) {
	t, ok := sf.Info(name)
	if !ok {
		return 0, 0, fmt.Errorf("safetensors %s: no tensor %q", sf.path, name)
	}
	size := int64(t.DType.Size())
	switch t.DType {
	case dtype.Float32, dtype.Float64, dtype.Float16, dtype.BFloat16:
	default:
		return 0, 0, nil
	}
	buf := make([]byte, min(t.Length, 4<<20/size*size))
	for off := int64(0); off < t.Length; {
		b := buf[:min(int64(len(buf)), t.Length-off)]
		if _, err := sf.r.ReadAt(b, t.Offset+off); err != nil {
			return nan, inf, &CorruptError{Path: sf.path, Msg: fmt.Sprintf("reading tensor %q: %v", name, err)}
		}
		n, i := countNonFinite(t.DType, b)
		nan, inf = nan+n, inf+i
		off += int64(len(b))
	}
	return nan, inf, nil
}

// countNonFinite counts NaN and ±Inf among little-endian elements of a
// floating type d, by their bits: an exponent of all ones is Inf with a
// zero mantissa, NaN otherwise.
func countNonFinite(d dtype.DType, b []byte) (nan, inf int64) {
	count := func(exp, mant uint64, bits uint64) {
		if bits&exp == exp {
			if bits&mant == 0 {
				inf++
			} else {
				nan++
			}
		}
	}
	switch d {
	case dtype.Float32:
		for i := 0; i+4 <= len(b); i += 4 {
			count(0x7f800000, 0x007fffff, uint64(binary.LittleEndian.Uint32(b[i:])))
		}
	case dtype.Float64:
		for i := 0; i+8 <= len(b); i += 8 {
			count(0x7ff0000000000000, 0x000fffffffffffff, binary.LittleEndian.Uint64(b[i:]))
		}
	case dtype.Float16:
		for i := 0; i+2 <= len(b); i += 2 {
			count(0x7c00, 0x03ff, uint64(binary.LittleEndian.Uint16(b[i:])))
		}
	case dtype.BFloat16:
		for i := 0; i+2 <= len(b); i += 2 {
			count(0x7f80, 0x007f, uint64(binary.LittleEndian.Uint16(b[i:])))
		}
	}
	return nan, inf
}
