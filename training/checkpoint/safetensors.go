package checkpoint

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"sort"
	"strings"
)

// DType is a safetensors element type.
type DType string

// The element types a checkpoint can hold, with safetensors' names.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	I8   DType = "I8"
	U8   DType = "U8"
	Bool DType = "BOOL"
)

// Size is the number of bytes of one element; 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	case I8, U8, Bool:
		return 1
	}
	return 0
}

// Tensor is one named tensor to write. Its bytes come from Data, or, when
// Data is nil, from Write, which must write exactly the tensor's bytes; Write
// lets a caller stream a tensor (e.g. copy it from the GPU in chunks) without
// holding the whole model twice in memory.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte // raw little-endian elements, row-major
	Write func(w io.Writer) error
}

// Bytes is the size of the tensor's data implied by its dtype and shape.
func (t *Tensor) Bytes() (int64, error) { return byteSize(t.Name, t.DType, t.Shape) }

func byteSize(name string, d DType, shape []int64) (int64, error) {
	if d.Size() == 0 {
		return 0, fmt.Errorf("tensor %q: unknown dtype %q", name, d)
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

// TensorInfo describes a tensor stored in a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	// Offset and Length locate the data in the file, from its start.
	Offset, Length int64
}

type headerEntry struct {
	DType   DType    `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// maxHeader bounds the JSON header a reader accepts, so a corrupt length does
// not make it allocate gigabytes.
const maxHeader = 100 << 20

// writeSafetensors streams tensors and string metadata to w in the
// safetensors format: an 8-byte little-endian header length, the JSON
// header (padded with spaces to a multiple of 8 so data is aligned), then
// each tensor's bytes in the order given.
func writeSafetensors(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for i := range tensors {
		t := &tensors[i]
		if t.Name == "" || t.Name == "__metadata__" {
			return fmt.Errorf("tensor %d: invalid name %q", i, t.Name)
		}
		if _, dup := header[t.Name]; dup {
			return fmt.Errorf("tensor %q: duplicate name", t.Name)
		}
		n, err := t.Bytes()
		if err != nil {
			return err
		}
		if t.Data != nil && int64(len(t.Data)) != n {
			return fmt.Errorf("tensor %q: %d bytes of data for %s%v (%d bytes)", t.Name, len(t.Data), t.DType, t.Shape, n)
		}
		if t.Data == nil && t.Write == nil && n > 0 {
			return fmt.Errorf("tensor %q: neither Data nor Write", t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		header[t.Name] = headerEntry{DType: t.DType, Shape: shape, Offsets: [2]int64{off, off + n}}
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
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(js)))
	if _, err := bw.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := bw.Write(js); err != nil {
		return err
	}
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
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if cw.n != want {
			return fmt.Errorf("tensor %q: Write wrote %d bytes, want %d", t.Name, cw.n, want)
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

// File is an open safetensors file whose header has been checked: every
// tensor lies inside the file, tensors do not overlap, cover the data
// section exactly, and match their dtype and shape.
type File struct {
	path     string
	f        *os.File
	tensors  []TensorInfo // by offset
	byName   map[string]int
	metadata map[string]string
}

// OpenSafetensors opens and checks a safetensors file. Errors name the file.
func OpenSafetensors(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	sf, err := readHeader(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return sf, nil
}

func readHeader(path string, f *os.File) (*File, error) {
	bad := func(format string, args ...any) error {
		return &CorruptError{Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, bad("file of %d bytes is too short for a header", size)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader || int64(n) > size-8 {
		return nil, bad("header length %d does not fit the file of %d bytes", n, size)
	}
	js := make([]byte, n)
	if _, err := io.ReadFull(f, js); err != nil {
		return nil, bad("reading the header: %v", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, bad("header is not JSON: %v", err)
	}
	sf := &File{path: path, f: f, byName: map[string]int{}}
	dataStart := 8 + int64(n)
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &sf.metadata); err != nil {
				return nil, bad("__metadata__ is not a map of strings: %v", err)
			}
			continue
		}
		var e headerEntry
		dec := json.NewDecoder(strings.NewReader(string(msg)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, bad("tensor %q: %v", name, err)
		}
		want, err := byteSize(name, e.DType, e.Shape)
		if err != nil {
			return nil, bad("%v", err)
		}
		if e.Offsets[1]-e.Offsets[0] != want || e.Offsets[0] < 0 {
			return nil, bad("tensor %q: offsets %v do not hold %s%v (%d bytes)", name, e.Offsets, e.DType, e.Shape, want)
		}
		sf.tensors = append(sf.tensors, TensorInfo{Name: name, DType: e.DType, Shape: e.Shape, Offset: dataStart + e.Offsets[0], Length: want})
	}
	// Empty tensors share their offset with the next tensor; they sort
	// first so the contiguity check below holds.
	sort.Slice(sf.tensors, func(i, j int) bool {
		a, b := sf.tensors[i], sf.tensors[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		return a.Length < b.Length
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

// CorruptError reports a malformed or truncated safetensors file.
type CorruptError struct {
	Path string
	Msg  string
}

// Error names the file and what is wrong with it.
func (e *CorruptError) Error() string { return "safetensors " + e.Path + ": " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2): a damaged
// file given to resume or evaluate.
func (e *CorruptError) BadInput() bool { return true }

// Path is the file's name.
func (sf *File) Path() string { return sf.path }

// Tensors lists the stored tensors in file order.
func (sf *File) Tensors() []TensorInfo { return sf.tensors }

// Metadata is the header's __metadata__ map.
func (sf *File) Metadata() map[string]string { return sf.metadata }

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
	if _, err := sf.f.ReadAt(dst, t.Offset); err != nil {
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

// hashFile feeds the whole file to h.
func (sf *File) hashFile(h hash.Hash) error {
	_, err := io.Copy(h, io.NewSectionReader(sf.f, 0, math.MaxInt64))
	return err
}

// Close closes the file.
func (sf *File) Close() error { return sf.f.Close() }
