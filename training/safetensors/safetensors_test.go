package safetensors

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
)

// TestRoundTrip writes every supported dtype and reads it back unchanged,
// with the data 8-byte aligned and the header in the documented layout.
func TestRoundTrip(t *testing.T) {
	var in []Tensor
	for i, dt := range []ort.DType{ort.Float32, ort.Float16, ort.BFloat16, ort.Float64, ort.Int64, ort.Int32, ort.Int8, ort.Uint8, ort.Bool} {
		shape := []int64{2, int64(i + 1)}
		data := make([]byte, ort.Numel(shape)*int64(dt.Size()))
		for k := range data {
			data[k] = byte(k*7 + i)
		}
		in = append(in, Tensor{Name: "t." + dt.String(), DType: dt, Shape: shape, Data: data})
	}
	in = append(in, Tensor{Name: "scalar", DType: ort.Float32, Shape: nil, Data: []byte{0, 0, 128, 63}})
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := Write(path, in, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	out, meta, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if meta["format"] != "pt" || len(out) != len(in) {
		t.Fatalf("meta %v, %d tensors, want format=pt and %d", meta, len(out), len(in))
	}
	for i := range in {
		a, b := in[i], out[i]
		if a.Name != b.Name || a.DType != b.DType || len(a.Shape) != len(b.Shape) || !bytes.Equal(a.Data, b.Data) {
			t.Errorf("tensor %d: wrote %s %v %v, read %s %v %v", i, a.Name, a.DType, a.Shape, b.Name, b.DType, b.Shape)
		}
	}
	raw, _ := Encode(in, nil)
	if n := binary.LittleEndian.Uint64(raw); n%8 != 0 || raw[8] != '{' {
		t.Errorf("header length %d not 8-aligned or not JSON", n)
	}
}

func TestRejectsCorruptFiles(t *testing.T) {
	good, _ := Encode([]Tensor{{Name: "a", DType: ort.Float32, Shape: []int64{2}, Data: make([]byte, 8)}}, nil)
	hdr := func(s string) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(s)))
		return append(append(b, s...), make([]byte, 8)...)
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"truncated", good[:len(good)-1], "truncated"},
		{"huge header length", append(binary.LittleEndian.AppendUint64(nil, 1<<40), good[8:]...), "does not fit"},
		{"bad dtype", hdr(`{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`), "dtype"},
		{"shape mismatch", hdr(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`), "byte range"},
		{"short", []byte{1, 2}, "too short"},
		// The last of repeated keys would win silently.
		{"repeated tensor", hdr(`{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), `names tensor "a" more than once`},
		{"repeated field", hdr(`{"a":{"dtype":"I64","dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), `names field "dtype" of tensor "a" more than once`},
		{"repeated metadata", hdr(`{"__metadata__":{"k":"1","k":"2"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), `names field "k" of __metadata__ more than once`},
	}
	for _, c := range cases {
		if _, _, err := Decode(c.data); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}
