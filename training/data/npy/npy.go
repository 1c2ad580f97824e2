// Package npy reads and writes NumPy's .npy arrays (format versions 1 to
// 3): the volumes medicaldiffusion's preprocessing saves with np.save, as
// float32 for training. Any numeric element type reads, in either byte
// order and either memory order; the values come back in C order (the
// last axis of the shape varying fastest), so that an array is indexed by
// its shape as NumPy reports it, whatever its memory order.
package npy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/safefile"
)

// magic opens every .npy file.
const magic = "\x93NUMPY"

// Header is what an .npy file says about its array.
type Header struct {
	// Descr is NumPy's type string: byte order, kind and size ("<f4").
	Descr string
	// FortranOrder is true when the file stores the first axis fastest
	// (Read returns the values in C order all the same).
	FortranOrder bool
	Shape        []int
	// Offset is where the data starts.
	Offset int64
}

// Len is the number of elements.
func (h Header) Len() int64 {
	n := int64(1)
	for _, d := range h.Shape {
		n *= int64(d)
	}
	return n
}

// Error is a file that is not an .npy array ortrain reads.
type Error struct {
	File string
	Msg  string
}

func (e *Error) Error() string { return e.File + ": " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *Error) BadInput() bool { return true }

// elem is how one element of a type string reads.
type elem struct {
	size  int
	order binary.ByteOrder
	read  func(b []byte, o binary.ByteOrder) float32
}

// parseDescr reads a type string: '<' little-endian, '>' big-endian, '|'
// or '=' for one byte (or native, little-endian here); kinds f, i, u, b.
func parseDescr(d string) (elem, error) {
	if len(d) < 3 {
		return elem{}, fmt.Errorf("element type %q", d)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if d[0] == '>' {
		order = binary.BigEndian
	} else if !strings.ContainsRune("<|=", rune(d[0])) {
		return elem{}, fmt.Errorf("element type %q", d)
	}
	size, err := strconv.Atoi(d[2:])
	if err != nil {
		return elem{}, fmt.Errorf("element type %q", d)
	}
	e := elem{size: size, order: order}
	switch d[1:] {
	case "f2":
		e.read = func(b []byte, o binary.ByteOrder) float32 { return dtype.Float16Bits(o.Uint16(b)).Float32() }
	case "f4":
		e.read = func(b []byte, o binary.ByteOrder) float32 { return math.Float32frombits(o.Uint32(b)) }
	case "f8":
		e.read = func(b []byte, o binary.ByteOrder) float32 { return float32(math.Float64frombits(o.Uint64(b))) }
	case "i1":
		e.read = func(b []byte, _ binary.ByteOrder) float32 { return float32(int8(b[0])) }
	case "u1", "b1":
		e.read = func(b []byte, _ binary.ByteOrder) float32 { return float32(b[0]) }
	case "i2":
		e.read = func(b []byte, o binary.ByteOrder) float32 { return float32(int16(o.Uint16(b))) }
	case "u2":
		e.read = func(b []byte, o binary.ByteOrder) float32 { return float32(o.Uint16(b)) }
	case "i4":
		e.read = func(b []byte, o binary.ByteOrder) float32 { return float32(int32(o.Uint32(b))) }
	case "u4":
		e.read = func(b []byte, o binary.ByteOrder) float32 { return float32(o.Uint32(b)) }
	case "i8":
		e.read = func(b []byte, o binary.ByteOrder) float32 { return float32(int64(o.Uint64(b))) }
	case "u8":
		e.read = func(b []byte, o binary.ByteOrder) float32 { return float32(o.Uint64(b)) }
	default:
		return elem{}, fmt.Errorf("element type %q: ortrain reads float, integer and bool arrays", d)
	}
	return e, nil
}

// Type is an element type as an .npy header names it (Header.Descr).
type Type struct {
	// Kind is NumPy's kind character: 'f' float, 'i' signed integer,
	// 'u' unsigned integer, 'b' bool.
	Kind byte
	// Size is the size of an element in bytes.
	Size  int
	Order binary.ByteOrder
}

// ParseType reads a type string ("<f4", ">i8", "|b1"): the numeric types
// Read reads; others (complex, strings, objects) are an error.
func ParseType(descr string) (Type, error) {
	e, err := parseDescr(descr)
	if err != nil {
		return Type{}, err
	}
	return Type{Kind: descr[1], Size: e.size, Order: e.order}, nil
}

// DecodeHeader reads an array's header from r, a stream of size bytes
// holding the whole .npy file (a member of an .npz archive, say), and
// checks that the stream holds the data it declares; name is used in
// errors. r is left at the start of the data.
func DecodeHeader(name string, r io.Reader, size int64) (Header, error) {
	h, err := readHeader(name, r)
	if err != nil {
		return h, err
	}
	return h, checkSize(name, h, size)
}

// ReadData reads the data of the array h describes from r, which stands
// at its start, as raw elements (h's type, in its byte order) in C order:
// a Fortran-order array's elements are moved where C order puts them.
// The caller has checked with DecodeHeader or ReadHeader that the file
// holds them.
func ReadData(name string, h Header, r io.Reader) ([]byte, error) {
	e, err := parseDescr(h.Descr)
	if err != nil {
		return nil, &Error{name, err.Error()}
	}
	n := h.Len()
	out := make([]byte, n*int64(e.size))
	if !h.FortranOrder || len(h.Shape) < 2 || n == 0 {
		if _, err := io.ReadFull(r, out); err != nil {
			return nil, &Error{name, fmt.Sprintf("truncated: the %v array of %s ends early", h.Shape, h.Descr)}
		}
		return out, nil
	}
	place := newCOrder(h.Shape)
	size := int64(e.size)
	buf := make([]byte, 1<<16/e.size*e.size)
	for i := int64(0); i < n; {
		m := min(int64(len(buf))/size, n-i)
		if _, err := io.ReadFull(r, buf[:m*size]); err != nil {
			return nil, &Error{name, fmt.Sprintf("truncated: the %v array of %s ends after %d of %d elements", h.Shape, h.Descr, i, n)}
		}
		for j := range m {
			at := place.next() * size
			copy(out[at:at+size], buf[j*size:(j+1)*size])
		}
		i += m
	}
	return out, nil
}

// ReadHeader reads the header of the .npy file at path.
func ReadHeader(path string) (Header, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	f, err := safefile.Open(path)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	h, err := readHeader(path, bufio.NewReader(f))
	if err != nil {
		return h, err
	}
	st, err := f.Stat()
	if err != nil {
		return h, err
	}
	return h, checkSize(path, h, st.Size())
}

// checkSize refuses a file too short for the array its header declares.
func checkSize(name string, h Header, size int64) error {
	e, _ := parseDescr(h.Descr)
	if want := h.Offset + h.Len()*int64(e.size); size < want {
		return &Error{name, fmt.Sprintf("truncated: %d bytes, the %v array of %s needs %d", size, h.Shape, h.Descr, want)}
	}
	return nil
}

func readHeader(name string, r io.Reader) (Header, error) {
	bad := func(format string, args ...any) (Header, error) {
		return Header{}, &Error{name, fmt.Sprintf(format, args...)}
	}
	pre := make([]byte, 8)
	if _, err := io.ReadFull(r, pre); err != nil || string(pre[:6]) != magic {
		return bad("not a NumPy .npy file (no \\x93NUMPY magic)")
	}
	var n int64
	offset := int64(10)
	switch pre[6] {
	case 1:
		b := make([]byte, 2)
		if _, err := io.ReadFull(r, b); err != nil {
			return bad("truncated header")
		}
		n = int64(binary.LittleEndian.Uint16(b))
	case 2, 3:
		b := make([]byte, 4)
		if _, err := io.ReadFull(r, b); err != nil {
			return bad("truncated header")
		}
		n, offset = int64(binary.LittleEndian.Uint32(b)), 12
	default:
		return bad(".npy format version %d.%d; ortrain reads 1 to 3", pre[6], pre[7])
	}
	if n > 1<<20 {
		return bad("header of %d bytes", n)
	}
	dict := make([]byte, n)
	if _, err := io.ReadFull(r, dict); err != nil {
		return bad("truncated header")
	}
	h, err := parseDict(string(dict))
	if err != nil {
		return bad("header %q: %v", strings.TrimSpace(string(dict)), err)
	}
	e, err := parseDescr(h.Descr)
	if err != nil {
		return bad("%v", err)
	}
	// The shape's product in bytes must be a size a file can have.
	total := int64(e.size)
	for _, d := range h.Shape {
		if d > 0 && total > (1<<50)/int64(d) {
			return bad("shape %v is larger than any file", h.Shape)
		}
		total *= int64(d)
	}
	h.Offset = offset + n
	return h, nil
}

// parseDict reads the header's Python dict literal, which np.save writes
// as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
func parseDict(s string) (Header, error) {
	var h Header
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return h, errors.New("not a dict")
	}
	s = s[1 : len(s)-1]
	seen := map[string]bool{}
	for {
		s = strings.TrimLeft(s, " ,\n")
		if s == "" {
			break
		}
		key, rest, ok := quoted(s)
		if !ok {
			return h, errors.New("a key is not a quoted string")
		}
		rest = strings.TrimLeft(rest, " ")
		if !strings.HasPrefix(rest, ":") {
			return h, fmt.Errorf("no ':' after %q", key)
		}
		rest = strings.TrimLeft(rest[1:], " ")
		seen[key] = true
		switch key {
		case "descr":
			if h.Descr, rest, ok = quoted(rest); !ok {
				return h, errors.New("descr is not a string (a structured array?)")
			}
		case "fortran_order":
			switch {
			case strings.HasPrefix(rest, "True"):
				h.FortranOrder, rest = true, rest[4:]
			case strings.HasPrefix(rest, "False"):
				rest = rest[5:]
			default:
				return h, errors.New("fortran_order is not True or False")
			}
		case "shape":
			end := strings.IndexByte(rest, ')')
			if !strings.HasPrefix(rest, "(") || end < 0 {
				return h, errors.New("shape is not a tuple")
			}
			h.Shape = []int{}
			for _, f := range strings.Split(rest[1:end], ",") {
				if f = strings.TrimSpace(f); f == "" {
					continue
				}
				d, err := strconv.Atoi(strings.TrimSuffix(f, "L"))
				if err != nil || d < 0 {
					return h, fmt.Errorf("shape element %q", f)
				}
				h.Shape = append(h.Shape, d)
			}
			rest = rest[end+1:]
		default:
			return h, fmt.Errorf("unknown key %q", key)
		}
		s = rest
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, fmt.Errorf("no %q", k)
		}
	}
	return h, nil
}

// quoted reads a Python string literal in single or double quotes at the
// start of s.
func quoted(s string) (string, string, bool) {
	if s == "" || (s[0] != '\'' && s[0] != '"') {
		return "", s, false
	}
	end := strings.IndexByte(s[1:], s[0])
	if end < 0 {
		return "", s, false
	}
	return s[1 : 1+end], s[2+end:], true
}

// Read reads the array at path as float32 in C order: element [i, j, k]
// of a shape (a, b, c) at (i*b+j)*c+k, whether the file stores it in C or
// Fortran order (np.asfortranarray(a) reads as a does).
func Read(path string) (Header, []float32, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	f, err := safefile.Open(path)
	if err != nil {
		return Header{}, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Header{}, nil, err
	}
	return decode(path, bufio.NewReaderSize(f, 1<<20), st.Size())
}

// decode reads an array of size bytes from r; name is used in errors.
// The size is checked before the data is allocated.
func decode(name string, r io.Reader, size int64) (Header, []float32, error) {
	h, err := readHeader(name, r)
	if err != nil {
		return h, nil, err
	}
	if err := checkSize(name, h, size); err != nil {
		return h, nil, err
	}
	e, _ := parseDescr(h.Descr)
	n := h.Len()
	out := make([]float32, n)
	// A Fortran-order file's values are placed where C order puts them as
	// they are read, so that no second copy of the array is needed.
	var place *cOrder
	if h.FortranOrder && len(h.Shape) > 1 && n > 0 {
		place = newCOrder(h.Shape)
	}
	buf := make([]byte, 1<<16/e.size*e.size)
	for i := int64(0); i < n; {
		m := min(int64(len(buf)/e.size), n-i)
		if _, err := io.ReadFull(r, buf[:m*int64(e.size)]); err != nil {
			return h, nil, &Error{name, fmt.Sprintf("truncated: the %v array of %s ends after %d of %d elements", h.Shape, h.Descr, i, n)}
		}
		if place == nil {
			for j := range m {
				out[i+j] = e.read(buf[j*int64(e.size):], e.order)
			}
		} else {
			for j := range m {
				out[place.next()] = e.read(buf[j*int64(e.size):], e.order)
			}
		}
		i += m
	}
	return h, out, nil
}

// cOrder walks an array's elements in Fortran order (the first axis
// fastest) and gives each one's offset in C order (the last axis fastest).
type cOrder struct {
	shape, stride, idx []int64
	off                int64
}

func newCOrder(shape []int) *cOrder {
	c := &cOrder{shape: make([]int64, len(shape)), stride: make([]int64, len(shape)), idx: make([]int64, len(shape))}
	s := int64(1)
	for k := len(shape) - 1; k >= 0; k-- {
		c.shape[k], c.stride[k] = int64(shape[k]), s
		s *= int64(shape[k])
	}
	return c
}

// next returns the C-order offset of the current element and steps to the
// next one in Fortran order.
func (c *cOrder) next() int64 {
	off := c.off
	for k := range c.idx {
		c.idx[k]++
		c.off += c.stride[k]
		if c.idx[k] < c.shape[k] || k == len(c.idx)-1 {
			break
		}
		c.off -= c.shape[k] * c.stride[k]
		c.idx[k] = 0
	}
	return off
}

// Write saves data as a little-endian float32 array of shape in C order
// (format version 1, as np.save writes it), replacing path atomically.
func Write(path string, shape []int, data []float32) error {
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return safefile.WriteBytes(path, true, Encode("<f4", false, shape, raw))
}

// Encode is the .npy file (format version 1, as np.save writes it) of an
// array of type descr and shape whose elements raw holds, in Fortran
// order when fortran is set, else in C order.
func Encode(descr string, fortran bool, shape []int, raw []byte) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	order := "False"
	if fortran {
		order = "True"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }", descr, order, tuple)
	// Pad with spaces and a newline so that the data starts on a multiple
	// of 64 bytes, as NumPy does.
	pad := 64 - (10+len(dict)+1)%64
	if pad == 64 {
		pad = 0
	}
	dict += strings.Repeat(" ", pad) + "\n"
	var b bytes.Buffer
	b.WriteString(magic)
	b.Write([]byte{1, 0})
	binary.Write(&b, binary.LittleEndian, uint16(len(dict)))
	b.WriteString(dict)
	b.Write(raw)
	return b.Bytes()
}
