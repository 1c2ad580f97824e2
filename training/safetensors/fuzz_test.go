package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ortrain/ortrain/internal/fuzzguard"
	"github.com/ortrain/ortrain/ort"
)

// FuzzOpen writes arbitrary bytes to a file, seeded with valid files and
// the headers of TestRejectsCorruptFiles, opens it and reads every tensor
// with Read and ReadInto. It must not panic; errors from Open must be
// CorruptErrors naming the file; an accepted file's tensors must lie
// inside it, one after the other, and hold the bytes their dtype and shape
// need; reading must not allocate more than 64 MiB plus 100 times the
// file; and Decode must agree with Open.
func FuzzOpen(f *testing.F) {
	good, err := Encode([]Tensor{
		{Name: "a", DType: ort.Float32, Shape: []int64{2}, Data: make([]byte, 8)},
		{Name: "empty", DType: ort.Int64, Shape: []int64{0, 3}, Data: []byte{}},
		{Name: "s", DType: ort.BFloat16, Shape: nil, Data: []byte{1, 2}},
		{Name: "b", DType: ort.Bool, Shape: []int64{1, 1, 3}, Data: []byte{0, 1, 0}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	hdr := func(s string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(s)))
		return append(append(b, s...), make([]byte, data)...)
	}
	for _, seed := range [][]byte{
		good[:len(good)-1],
		append(binary.LittleEndian.AppendUint64(nil, 1<<40), good[8:]...),
		hdr(`{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`, 8),
		hdr(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8),
		hdr(`{"a":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[1,-9223372036854775808]}}`, 8),
		hdr(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[1,-9223372036854775808]}}`, 8),
		hdr(`{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, 8),
		hdr(`{"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}}`, 8),
		{1, 2},
	} {
		f.Add(seed)
	}
	// One file per fuzzing process, rewritten for each input through a
	// handle kept open (os.WriteFile's truncating open is 20 times slower).
	path := filepath.Join(f.TempDir(), "w.safetensors")
	w, err := os.Create(path)
	if err != nil {
		f.Fatal(err)
	}
	defer w.Close()
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := w.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt(b, 0); err != nil {
			t.Fatal(err)
		}
		defer fuzzguard.Watchdog(10 * time.Second)()
		before := fuzzguard.Allocated()
		sf, err := Open(path)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), path) {
				t.Errorf("error is not a CorruptError naming the file: %v", err)
			}
			if _, _, derr := Decode(b); derr == nil {
				t.Errorf("Decode accepts what Open refuses (%v)", err)
			}
			return
		}
		defer sf.Close()
		end := int64(8 + binary.LittleEndian.Uint64(b))
		for _, ti := range sf.Tensors() {
			want, err := byteSize(ti.Name, ti.DType, ti.Shape)
			if err != nil || want != ti.Length {
				t.Errorf("tensor %q: length %d for %v %v (%v)", ti.Name, ti.Length, ti.DType, ti.Shape, err)
			}
			if ti.Offset != end || ti.Length < 0 || ti.Length > int64(len(b))-ti.Offset {
				t.Fatalf("tensor %q at %d+%d: not at %d inside the %d-byte file", ti.Name, ti.Offset, ti.Length, end, len(b))
			}
			end += ti.Length
			data, err := sf.Read(ti.Name)
			if err != nil {
				t.Errorf("tensor %q: %v", ti.Name, err)
				continue
			}
			if !bytes.Equal(data, b[ti.Offset:ti.Offset+ti.Length]) {
				t.Errorf("tensor %q: Read gives other bytes than the file holds", ti.Name)
			}
			if err := sf.ReadInto(ti.Name, data); err != nil {
				t.Errorf("tensor %q: ReadInto: %v", ti.Name, err)
			}
		}
		if end != int64(len(b)) {
			t.Errorf("tensors end at %d in a %d-byte file", end, len(b))
		}
		if used, budget := fuzzguard.Allocated()-before, uint64(64<<20+100*len(b)); used > budget {
			t.Errorf("reading %d bytes allocated %d bytes (budget %d)", len(b), used, budget)
		}
		ts, _, err := Decode(b)
		if err != nil || len(ts) != len(sf.Tensors()) {
			t.Errorf("Decode: %d tensors, %v; Open found %d", len(ts), err, len(sf.Tensors()))
		}
	})
}
