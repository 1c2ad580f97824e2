// Package safetensors reads and writes the safetensors format: an 8-byte
// little-endian header length, a JSON header mapping each tensor's name to
// its dtype, shape and byte range, then the raw little-endian data.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/ortrain/ortrain/ort"
)

// Tensor is one named tensor with its raw little-endian bytes.
type Tensor struct {
	Name  string
	DType ort.DType
	Shape []int64
	Data  []byte
}

var names = map[ort.DType]string{
	ort.Float32: "F32", ort.Float16: "F16", ort.BFloat16: "BF16", ort.Float64: "F64",
	ort.Int64: "I64", ort.Int32: "I32", ort.Int8: "I8", ort.Uint8: "U8", ort.Bool: "BOOL",
}

type entry struct {
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// maxHeader bounds the JSON header a reader accepts (as the reference
// implementation does), so a corrupt length cannot exhaust memory.
const maxHeader = 100 << 20

// Encode serialises tensors (in the given order) and optional metadata.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, t := range tensors {
		dt, ok := names[t.DType]
		if !ok {
			return nil, fmt.Errorf("safetensors: tensor %q has type %v, which safetensors cannot hold", t.Name, t.DType)
		}
		if want := ort.Numel(t.Shape) * int64(t.DType.Size()); want != int64(len(t.Data)) {
			return nil, fmt.Errorf("safetensors: tensor %q: %d bytes for shape %v of %v, want %d", t.Name, len(t.Data), t.Shape, t.DType, want)
		}
		if _, dup := header[t.Name]; dup || t.Name == "__metadata__" {
			return nil, fmt.Errorf("safetensors: duplicate or reserved tensor name %q", t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		header[t.Name] = entry{dt, shape, [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	h, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	for len(h)%8 != 0 { // the data starts 8-byte aligned
		h = append(h, ' ')
	}
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, uint64(len(h)))
	buf.Write(h)
	for _, t := range tensors {
		buf.Write(t.Data)
	}
	return buf.Bytes(), nil
}

// Write saves tensors to a file.
func Write(path string, tensors []Tensor, metadata map[string]string) error {
	b, err := Encode(tensors, metadata)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Decode parses a safetensors file's bytes; tensors come back in data
// order and share memory with b.
func Decode(b []byte) ([]Tensor, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("safetensors: %d bytes, too short for a header", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("safetensors: header length %d does not fit the %d-byte file", n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, nil, fmt.Errorf("safetensors: bad header: %w", err)
	}
	data := b[8+n:]
	var meta map[string]string
	var out []Tensor
	var starts []int64
	for name, r := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(r, &meta); err != nil {
				return nil, nil, fmt.Errorf("safetensors: bad metadata: %w", err)
			}
			continue
		}
		var e entry
		if err := json.Unmarshal(r, &e); err != nil {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: %w", name, err)
		}
		var dt ort.DType
		for d, s := range names {
			if s == e.DType {
				dt = d
			}
		}
		if dt == 0 {
			return nil, nil, fmt.Errorf("safetensors: tensor %q has dtype %q, which ortrain does not read", name, e.DType)
		}
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi < lo || hi > int64(len(data)) || hi-lo != ort.Numel(e.Shape)*int64(dt.Size()) {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: byte range %v does not match shape %v of %s in %d data bytes", name, e.Offsets, e.Shape, e.DType, len(data))
		}
		out = append(out, Tensor{Name: name, DType: dt, Shape: e.Shape, Data: data[lo:hi:hi]})
		starts = append(starts, lo)
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		if starts[idx[a]] != starts[idx[b]] {
			return starts[idx[a]] < starts[idx[b]]
		}
		return out[idx[a]].Name < out[idx[b]].Name
	})
	sorted := make([]Tensor, len(out))
	for i, k := range idx {
		sorted[i] = out[k]
	}
	return sorted, meta, nil
}

// Read loads a safetensors file.
func Read(path string) ([]Tensor, map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return Decode(b)
}
