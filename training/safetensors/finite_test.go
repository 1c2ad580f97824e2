package safetensors

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/dtype"
)

// TestNonFinite: NaN and ±Inf are counted in each floating type, across
// the pieces NonFinite reads, and integer tensors have none.
func TestNonFinite(t *testing.T) {
	n := 3<<20 + 5 // float32: more than one 4 MiB piece
	f32 := make([]byte, 4*n)
	binary.LittleEndian.PutUint32(f32[4*7:], math.Float32bits(float32(math.NaN())))
	binary.LittleEndian.PutUint32(f32[4*(n-1):], math.Float32bits(float32(math.Inf(-1))))
	binary.LittleEndian.PutUint32(f32[4*9:], math.Float32bits(math.MaxFloat32))
	f64 := make([]byte, 8*4)
	binary.LittleEndian.PutUint64(f64[8:], math.Float64bits(math.Inf(1)))
	f16 := []byte{0x00, 0x7c, 0x01, 0x7e, 0xff, 0x7b, 0x00, 0xfc} // +Inf, NaN, 65504, -Inf
	bf16 := []byte{0x80, 0x7f, 0xc1, 0xff, 0x7f, 0x7f}            // +Inf, NaN, max finite
	i32 := []byte{0x00, 0x00, 0x80, 0x7f}                         // the bits of +Inf, as an integer
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := Write(path, []Tensor{
		{Name: "f32", DType: dtype.Float32, Shape: []int64{int64(n)}, Data: f32},
		{Name: "f64", DType: dtype.Float64, Shape: []int64{4}, Data: f64},
		{Name: "f16", DType: dtype.Float16, Shape: []int64{4}, Data: f16},
		{Name: "bf16", DType: dtype.BFloat16, Shape: []int64{3}, Data: bf16},
		{Name: "i32", DType: dtype.Int32, Shape: []int64{1}, Data: i32},
	}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, want := range map[string][2]int64{"f32": {1, 1}, "f64": {0, 1}, "f16": {1, 2}, "bf16": {1, 1}, "i32": {0, 0}} {
		nan, inf, err := f.NonFinite(name)
		if err != nil || nan != want[0] || inf != want[1] {
			t.Errorf("%s: %d NaN, %d Inf, %v; want %d and %d", name, nan, inf, err, want[0], want[1])
		}
	}
}
