// Package safetensors reads and writes the safetensors format: an 8-byte
// little-endian header length, a JSON header mapping each tensor's name to
// its dtype, shape and byte range, then the raw little-endian data.
//
// Writing streams: a tensor's bytes come from a slice or from a function
// that writes them (copying a GPU tensor down piece by piece, say), so a large
// model is never held twice in memory. Reading opens a file, checks its whole
// header against the file's size and hands out tensors one at a time; every
// defect is a CorruptError naming the file.
package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/safefile"
)

// Tensor is one named tensor to write, or one read back. Its bytes come from
// Data, or, when Data is nil, from Write, which must write exactly the
// tensor's bytes; Write lets a caller stream a tensor without holding the
// whole model twice in memory.
type Tensor struct {
	Name  string
	DType dtype.DType
	Shape []int64
	Data  []byte // raw little-endian elements, row-major
	Write func(w io.Writer) error
}

// Bytes is the size of the tensor's data implied by its dtype and shape.
func (t *Tensor) Bytes() (int64, error) { return byteSize(t.Name, t.DType, t.Shape) }

// names maps element types to safetensors' dtype strings.
var names = map[dtype.DType]string{
	dtype.Float32: "F32", dtype.Float16: "F16", dtype.BFloat16: "BF16", dtype.Float64: "F64",
	dtype.Int64: "I64", dtype.Int32: "I32", dtype.Int8: "I8", dtype.Uint8: "U8", dtype.Bool: "BOOL",
}

// ParseDTypeName reads a safetensors dtype string.
func ParseDTypeName(s string) (dtype.DType, bool) {
	for d, n := range names {
		if n == s {
			return d, true
		}
	}
	return 0, false
}

func byteSize(name string, d dtype.DType, shape []int64) (int64, error) {
	if _, ok := names[d]; !ok {
		return 0, fmt.Errorf("tensor %q: unknown dtype %v", name, d)
	}
	n := int64(d.Size())
	for _, s := range shape {
		if s < 0 || (s > 0 && n > math.MaxInt64/s) {
			return 0, fmt.Errorf("tensor %q: bad shape %v", name, shape)
		}
		n *= s
	}
	return n, nil
}

type entry struct {
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// maxHeader bounds the JSON header a reader accepts (as the reference
// implementation does), so a corrupt length cannot exhaust memory.
const maxHeader = 100 << 20

// WriteTo streams tensors (in the given order) and optional metadata to w:
// the header padded with spaces to a multiple of 8 so the data is aligned,
// then each tensor's bytes, read once from Data or Write.
func WriteTo(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for i := range tensors {
		t := &tensors[i]
		if t.Name == "" || t.Name == "__metadata__" {
			return fmt.Errorf("safetensors: tensor %d: invalid name %q", i, t.Name)
		}
		if _, dup := header[t.Name]; dup {
			return fmt.Errorf("safetensors: tensor %q: duplicate name", t.Name)
		}
		n, err := t.Bytes()
		if err != nil {
			return fmt.Errorf("safetensors: %w", err)
		}
		if t.Data != nil && int64(len(t.Data)) != n {
			return fmt.Errorf("safetensors: tensor %q: %d bytes of data for %v%v (%d bytes)", t.Name, len(t.Data), t.DType, t.Shape, n)
		}
		if t.Data == nil && t.Write == nil && n > 0 {
			return fmt.Errorf("safetensors: tensor %q: neither Data nor Write", t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		header[t.Name] = entry{DType: names[t.DType], Shape: shape, Offsets: [2]int64{off, off + n}}
		off += n
	}
	js, err := json.Marshal(header)
	if err != nil {
		return err
	}
	if pad := (8 - len(js)%8) % 8; pad > 0 {
		js = append(js, strings.Repeat(" ", pad)...)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(js))))
	bw.Write(js)
	for i := range tensors {
		t := &tensors[i]
		if t.Data != nil {
			if _, err := bw.Write(t.Data); err != nil {
				return err
			}
			continue
		}
		if t.Write == nil {
			continue
		}
		want, _ := t.Bytes()
		cw := &countingWriter{w: bw}
		if err := t.Write(cw); err != nil {
			return fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
		}
		if cw.n != want {
			return fmt.Errorf("safetensors: tensor %q: Write wrote %d bytes, want %d", t.Name, cw.n, want)
		}
	}
	return bw.Flush()
}

type countingWriter struct {
	w io.Writer
	n int64
}

// Write counts the bytes passed on.
func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Encode serialises tensors into memory; for small files and tests.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	err := WriteTo(&buf, tensors, metadata)
	return buf.Bytes(), err
}

// Write streams tensors to a new file at path; on error the partial file
// is removed. (Crash-safe replacement is the caller's: see package
// checkpoint.)
func Write(path string, tensors []Tensor, metadata map[string]string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	return WriteTo(f, tensors, metadata)
}

// CorruptError reports a malformed or truncated safetensors file.
type CorruptError struct {
	Path string
	Msg  string
}

// Error names the file and what is wrong with it.
func (e *CorruptError) Error() string { return "safetensors " + e.Path + ": " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2): a damaged
// file given to train, resume or evaluate.
func (e *CorruptError) BadInput() bool { return true }

// TensorInfo describes a tensor stored in a safetensors file.
type TensorInfo struct {
	Name  string
	DType dtype.DType
	Shape []int64
	// Offset and Length locate the data in the file, from its start.
	Offset, Length int64
}

// File is an open safetensors file whose header has been checked: every
// tensor lies inside the file, tensors do not overlap, cover the data
// section exactly, and match their dtype and shape.
type File struct {
	path     string
	r        io.ReaderAt
	closer   io.Closer
	tensors  []TensorInfo // by offset
	byName   map[string]int
	metadata map[string]string
}

// Open opens and checks a safetensors file. Errors name the file.
func Open(path string) (*File, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	sf, err := parse(path, f, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	sf.closer = f
	return sf, nil
}

// parse reads and checks the header of the size bytes in r.
func parse(path string, r io.ReaderAt, size int64) (*File, error) {
	bad := func(format string, args ...any) error {
		return &CorruptError{Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, bad("%d bytes, too short for a header", size)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader || int64(n) > size-8 {
		return nil, bad("header length %d does not fit the file of %d bytes", n, size)
	}
	js := make([]byte, n)
	if _, err := r.ReadAt(js, 8); err != nil {
		return nil, bad("reading the header: %v", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, bad("header is not JSON: %v", err)
	}
	// encoding/json keeps the last of repeated keys: two entries for one
	// tensor would load whichever came last, silently.
	if key, err := repeatedKey(json.NewDecoder(bytes.NewReader(js)), ""); err != nil {
		return nil, bad("header is not JSON: %v", err)
	} else if key != "" {
		return nil, bad("the header names %s more than once; each tensor (and each of its fields) must appear once", key)
	}
	sf := &File{path: path, r: r, byName: map[string]int{}}
	dataStart := 8 + int64(n)
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &sf.metadata); err != nil {
				return nil, bad("__metadata__ is not a map of strings: %v", err)
			}
			continue
		}
		var e entry
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, bad("tensor %q: %v", name, err)
		}
		dt, ok := ParseDTypeName(e.DType)
		if !ok {
			return nil, bad("tensor %q has dtype %q, which ortrain does not read", name, e.DType)
		}
		want, err := byteSize(name, dt, e.Shape)
		if err != nil {
			return nil, bad("%v", err)
		}
		if e.Offsets[1]-e.Offsets[0] != want || e.Offsets[0] < 0 {
			return nil, bad("tensor %q: byte range %v does not hold %s%v (%d bytes)", name, e.Offsets, e.DType, e.Shape, want)
		}
		sf.tensors = append(sf.tensors, TensorInfo{Name: name, DType: dt, Shape: e.Shape, Offset: dataStart + e.Offsets[0], Length: want})
	}
	// Empty tensors share their offset with the next tensor; they sort
	// first so the contiguity check below holds.
	sort.Slice(sf.tensors, func(i, j int) bool {
		a, b := sf.tensors[i], sf.tensors[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		if a.Length != b.Length {
			return a.Length < b.Length
		}
		return a.Name < b.Name
	})
	end := dataStart
	for i, t := range sf.tensors {
		if t.Offset != end {
			return nil, bad("tensor %q starts at data offset %d, want %d (gap or overlap)", t.Name, t.Offset-dataStart, end-dataStart)
		}
		end += t.Length
		sf.byName[t.Name] = i
	}
	if end != size {
		return nil, bad("data ends at byte %d but the file has %d bytes (truncated or trailing data)", end, size)
	}
	return sf, nil
}

// Path is the file's name.
func (sf *File) Path() string { return sf.path }

// Tensors lists the stored tensors in file order.
func (sf *File) Tensors() []TensorInfo { return sf.tensors }

// Info describes the named tensor.
func (sf *File) Info(name string) (TensorInfo, bool) {
	i, ok := sf.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return sf.tensors[i], true
}

// ReadInto fills dst, which must have exactly the tensor's byte length, with
// the named tensor's data, so a caller can load straight into its buffer.
func (sf *File) ReadInto(name string, dst []byte) error {
	t, ok := sf.Info(name)
	if !ok {
		return fmt.Errorf("safetensors %s: no tensor %q", sf.path, name)
	}
	if int64(len(dst)) != t.Length {
		return fmt.Errorf("safetensors %s: tensor %q has %d bytes, buffer %d", sf.path, name, t.Length, len(dst))
	}
	if _, err := sf.r.ReadAt(dst, t.Offset); err != nil {
		return &CorruptError{Path: sf.path, Msg: fmt.Sprintf("reading tensor %q: %v", name, err)}
	}
	return nil
}

// Read returns a new copy of the named tensor's data.
func (sf *File) Read(name string) ([]byte, error) {
	t, ok := sf.Info(name)
	if !ok {
		return nil, fmt.Errorf("safetensors %s: no tensor %q", sf.path, name)
	}
	buf := make([]byte, t.Length)
	return buf, sf.ReadInto(name, buf)
}

// Close closes the file.
func (sf *File) Close() error {
	if sf.closer == nil {
		return nil
	}
	return sf.closer.Close()
}

// Decode parses a whole safetensors file held in memory; tensors come
// back in file order and share memory with b. Errors are CorruptErrors.
func Decode(b []byte) ([]Tensor, map[string]string, error) {
	sf, err := parse("(in memory)", bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, nil, err
	}
	out := make([]Tensor, len(sf.tensors))
	for i, t := range sf.tensors {
		out[i] = Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: b[t.Offset : t.Offset+t.Length : t.Offset+t.Length]}
	}
	return out, sf.metadata, nil
}

// Read loads a whole safetensors file into memory, one tensor at a time.
func Read(path string) ([]Tensor, map[string]string, error) {
	sf, err := Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer sf.Close()
	out := make([]Tensor, len(sf.tensors))
	for i, t := range sf.tensors {
		d, err := sf.Read(t.Name)
		if err != nil {
			return nil, nil, err
		}
		out[i] = Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: d}
	}
	return out, sf.metadata, nil
}

// repeatedKey reads one JSON value from dec and returns the first key that
// appears twice in one of its objects, described for an error ("tensor
// \"w\"", "field \"dtype\" of tensor \"w\""), or "" when none does. in
// describes the enclosing object's key ("" at the top).
func repeatedKey(dec *json.Decoder, in string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return "", err
			}
			key, _ := k.(string)
			what := fmt.Sprintf("tensor %q", key)
			if key == "__metadata__" && in == "" {
				what = key
			} else if in != "" {
				what = fmt.Sprintf("field %q of %s", key, in)
			}
			if seen[key] {
				return what, nil
			}
			seen[key] = true
			if dup, err := repeatedKey(dec, what); dup != "" || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token() // '}'
		return "", err
	case json.Delim('['):
		for dec.More() {
			if dup, err := repeatedKey(dec, in); dup != "" || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token() // ']'
		return "", err
	}
	return "", nil
}
