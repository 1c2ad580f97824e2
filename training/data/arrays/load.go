package arrays

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/data"
)

// Len is the number of samples: the first axis of every array.
func (ds *Dataset) Len() int { return ds.n }

// Spec names one sample's tensors: one per array, named after it (the
// file's name without .npy), of the type and shape its model input takes.
func (ds *Dataset) Spec() []data.TensorSpec { return ds.spec }

// CacheBytes is the size of the arrays held in memory (compressed or
// Fortran-order arrays); the others are read a sample at a time.
func (ds *Dataset) CacheBytes() int64 { return ds.held }

// File names the file (or archive member) of the array that gives tensor
// name, "" for none.
func (ds *Dataset) File(name string) string {
	for _, a := range ds.arrays {
		if a.name == name {
			return a.file
		}
	}
	return ""
}

// Close closes the files the samples are read from; Load fails after it.
func (ds *Dataset) Close() error {
	for _, f := range ds.files {
		f.Close()
	}
	ds.files = nil
	return nil
}

// Load writes sample i of every array into dst, converted to the loader
// type. Float values that are NaN or infinite (after conversion to
// float32) are refused, naming the file and the sample, as the volumes
// kind refuses such voxels; so are integers outside the range of the type
// the model's input takes.
func (ds *Dataset) Load(i int, _ *rand.Rand, dst data.Sample) error {
	if i < 0 || i >= ds.n {
		return fmt.Errorf("arrays: sample %d of %d", i, ds.n)
	}
	for k, a := range ds.arrays {
		var row []byte
		var bp *[]byte
		if a.stored {
			bp = ds.buffer(a.bytes)
			row = (*bp)[:a.bytes]
			if _, err := a.f.ReadAt(row, a.off+int64(i)*int64(a.bytes)); err != nil {
				ds.bufs.Put(bp)
				return &Error{a.file, fmt.Sprintf("reading sample %d: %v", i, err)}
			}
		} else {
			row = a.mem[i*a.bytes : (i+1)*a.bytes]
		}
		err := a.decode(i, row, &dst[k])
		if bp != nil {
			ds.bufs.Put(bp)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// buffer is a byte buffer of at least n bytes from the pool.
func (ds *Dataset) buffer(n int) *[]byte {
	if bp, ok := ds.bufs.Get().(*[]byte); ok && cap(*bp) >= n {
		return bp
	}
	b := make([]byte, n)
	return &b
}

// decode converts one sample's raw elements into t.
func (a *array) decode(i int, row []byte, t *data.Tensor) error {
	size, o := a.typ.Size, a.typ.Order
	switch t.DType {
	case data.Float32:
		out := t.F32
		switch {
		case a.typ.Kind == 'f' && size == 4:
			for j := range out {
				out[j] = math.Float32frombits(o.Uint32(row[4*j:]))
			}
		case a.typ.Kind == 'f' && size == 8:
			for j := range out {
				out[j] = float32(math.Float64frombits(o.Uint64(row[8*j:])))
			}
		case a.typ.Kind == 'f' && size == 2:
			for j := range out {
				out[j] = dtype.Float16Bits(o.Uint16(row[2*j:])).Float32()
			}
		default:
			for j := range out {
				v, ok := a.integer(row[j*size:])
				if !ok {
					return a.outOfRange(i, j, row[j*size:])
				}
				out[j] = float32(v)
			}
		}
		if a.typ.Kind == 'f' {
			return a.checkFinite(i, out)
		}
	case data.Int64:
		out := t.I64
		for j := range out {
			v, ok := a.integer(row[j*size:])
			if !ok || v < a.lo || v > a.hi {
				return a.outOfRange(i, j, row[j*size:])
			}
			out[j] = v
		}
	case data.Uint8:
		out := t.U8
		for j := range out {
			v, ok := a.integer(row[j*size:])
			if !ok || v < a.lo || v > a.hi {
				return a.outOfRange(i, j, row[j*size:])
			}
			out[j] = uint8(v)
		}
	}
	return nil
}

// integer reads an integer or bool element; false for a uint64 past
// int64's range.
func (a *array) integer(b []byte) (int64, bool) {
	o := a.typ.Order
	switch a.typ.Kind {
	case 'b':
		if b[0] != 0 {
			return 1, true
		}
		return 0, true
	case 'i':
		switch a.typ.Size {
		case 1:
			return int64(int8(b[0])), true
		case 2:
			return int64(int16(o.Uint16(b))), true
		case 4:
			return int64(int32(o.Uint32(b))), true
		case 8:
			return int64(o.Uint64(b)), true
		}
	case 'u':
		switch a.typ.Size {
		case 1:
			return int64(b[0]), true
		case 2:
			return int64(o.Uint16(b)), true
		case 4:
			return int64(o.Uint32(b)), true
		case 8:
			v := o.Uint64(b)
			return int64(v), v <= math.MaxInt64
		}
	}
	return 0, false
}

// outOfRange is the error for element j of sample i, which the model's
// input type cannot hold.
func (a *array) outOfRange(i, j int, b []byte) error {
	v := "?"
	if a.typ.Kind == 'u' && a.typ.Size == 8 {
		v = strconv.FormatUint(a.typ.Order.Uint64(b), 10)
	} else if x, ok := a.integer(b); ok {
		v = strconv.FormatInt(x, 10)
	}
	return &Error{a.file, fmt.Sprintf("the value %s at %s is out of the model's input's range: %s", v, a.index(i, j), a.rangeWhat)}
}

// index writes element j of sample i as an index into the array.
func (a *array) index(i, j int) string {
	shape := a.h.Shape[1:]
	idx := make([]string, len(shape)+1)
	idx[0] = strconv.Itoa(i)
	for k := len(shape) - 1; k >= 0; k-- {
		idx[k+1] = strconv.Itoa(j % shape[k])
		j /= shape[k]
	}
	return "[" + strings.Join(idx, ", ") + "]"
}

// checkFinite refuses a sample holding NaN or ±Inf. x-x is 0 for every
// finite x and NaN otherwise.
func (a *array) checkFinite(i int, v []float32) error {
	first := -1
	for j, x := range v {
		if x-x != 0 {
			first = j
			break
		}
	}
	if first < 0 {
		return nil
	}
	var nan, pos, neg int
	for _, x := range v[first:] {
		switch {
		case x != x:
			nan++
		case math.IsInf(float64(x), 1):
			pos++
		case math.IsInf(float64(x), -1):
			neg++
		}
	}
	var kinds []string
	for _, k := range []struct {
		n    int
		what string
	}{{nan, "NaN"}, {pos, "+Inf"}, {neg, "-Inf"}} {
		if k.n > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s", k.n, k.what))
		}
	}
	after := ""
	if a.typ.Size == 8 {
		after = " as float32"
	}
	return &Error{a.file, fmt.Sprintf("sample %d: %d of its %d values are not finite%s (%s), the first at %s; NaN and infinite values poison every loss and gradient they reach",
		i, nan+pos+neg, len(v), after, strings.Join(kinds, ", "), a.index(i, first))}
}

// shape is the sample shape the loader gives.
func (a *array) shape() []int {
	if a.reshape != nil {
		return slices.Clone(a.reshape)
	}
	return slices.Clone(a.h.Shape[1:])
}

// dims writes a model shape, free sizes as "?".
func dims(d []int64) string {
	s := make([]string, len(d))
	for i, n := range d {
		s[i] = "?"
		if n > 0 {
			s[i] = strconv.FormatInt(n, 10)
		}
	}
	return "[" + strings.Join(s, " ") + "]"
}

// squeeze drops the axes of size 1.
func squeeze(d []int) []int64 {
	var out []int64
	for _, n := range d {
		if n != 1 {
			out = append(out, int64(n))
		}
	}
	return out
}

func squeeze64(d []int64) []int64 {
	var out []int64
	for _, n := range d {
		if n != 1 {
			out = append(out, n)
		}
	}
	return out
}

var _ data.Cacher = (*Dataset)(nil)
