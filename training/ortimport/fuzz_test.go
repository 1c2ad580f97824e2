package ortimport

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ortrain/ortrain/internal/fuzzguard"
	"github.com/ortrain/ortrain/ort"
)

// aliasedCheckpoint builds a checkpoint whose requires_grad_params vector
// holds k offsets to one and the same float32 tensor of n values: a valid
// flatbuffer layout, but one that, read naively, makes k copies of the
// tensor's data out of a file holding it once.
func aliasedCheckpoint(k, n int) []byte {
	le := binary.LittleEndian
	var b []byte
	u16 := func(v ...int) {
		for _, x := range v {
			b = le.AppendUint16(b, uint16(x))
		}
	}
	u32 := func(v ...int) {
		for _, x := range v {
			b = le.AppendUint32(b, uint32(x))
		}
	}
	// Root table at 16 (vtable at 8): module_state at +4, version at +8.
	u32(16)
	b = append(b, "ODTC"...)
	u16(8, 12, 8, 4)
	u32(8, 36-20, 1)
	// ModuleState vtable at 28, table at 36: field 0 at +4 -> vector at 44.
	u16(6, 8, 4, 0)
	u32(8, 44-40)
	// The vector: k offsets to the tensor table at T+16, its vtable at T,
	// T 8-aligned so that the dims vector's int64s are.
	t := (48 + 4*k + 7) &^ 7
	u32(k)
	for i := range k {
		u32(t + 16 - (48 + 4*i))
	}
	b = append(b, make([]byte, t-len(b))...)
	// Tensor vtable: name +4, dims +8, data_type +12, raw_data +16.
	u16(14, 20, 4, 0, 8, 12, 16, 0)
	// Tensor table at T+16; its name at T+36, dims at T+44, data at T+56.
	u32(16, t+36-(t+20), t+44-(t+24), int(ort.Float32), t+56-(t+32))
	u32(1)
	b = append(b, 'w', 0, 0, 0)
	u32(1)
	b = le.AppendUint64(b, uint64(n))
	u32(4 * n)
	return append(b, make([]byte, 4*n)...)
}

// FuzzParseCheckpoint feeds arbitrary bytes, seeded with ONNX Runtime's
// checkpoint of testdata/v1.12.1, mutants of it with each 32-bit word set
// to 0xFFFFFFFF, and checkpoints whose tensors share data, to the
// checkpoint reader. It must not panic; errors must be FormatErrors naming
// the file; an accepted checkpoint's tensors must hold the bytes their type
// and shape need; and reading n bytes must not allocate more than 64 MiB
// plus 100 times n.
func FuzzParseCheckpoint(f *testing.F) {
	good, err := os.ReadFile(filepath.Join("testdata", "v1.12.1", CheckpointFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for i := 0; i+4 <= len(good); i += 4 {
		m := append([]byte(nil), good...)
		binary.LittleEndian.PutUint32(m[i:], 0xFFFFFFFF)
		f.Add(m)
	}
	f.Add(aliasedCheckpoint(1, 4))
	f.Add(aliasedCheckpoint(3, 4))
	f.Add(aliasedCheckpoint(4000, 10000))
	const path = "fuzz/checkpoint"
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzzguard.Watchdog(10 * time.Second)()
		before := fuzzguard.Allocated()
		c, err := parseCheckpoint(path, b)
		if used, budget := fuzzguard.Allocated()-before, uint64(64<<20+100*len(b)); used > budget {
			t.Errorf("reading %d bytes allocated %d bytes (budget %d)", len(b), used, budget)
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Path != path || !fe.BadInput() {
				t.Errorf("error is not a FormatError naming %s: %v", path, err)
			}
			return
		}
		var all []Tensor
		all = append(append(all, c.Params...), c.Frozen...)
		for _, g := range c.Groups {
			for _, s := range g.States {
				all = append(all, s.Momentums...)
			}
		}
		for _, x := range all {
			for _, d := range x.Shape {
				if d < 0 {
					t.Fatalf("tensor %q accepted with shape %v", x.Name, x.Shape)
				}
			}
			if c.Nominal && len(x.Data) == 0 {
				continue
			}
			if want := ort.Numel(x.Shape) * int64(x.DType.Size()); x.DType.Size() == 0 || int64(len(x.Data)) != want {
				t.Errorf("tensor %q accepted: %v %v with %d bytes of data", x.Name, x.DType, x.Shape, len(x.Data))
			}
		}
	})
}

// TestCheckpointSharedData: a checkpoint whose tensor offsets all point
// at one tensor is refused as corrupt rather than copied out k times.
func TestCheckpointSharedData(t *testing.T) {
	if c, err := parseCheckpoint("x", aliasedCheckpoint(1, 4)); err != nil || len(c.Params) != 1 || len(c.Params[0].Data) != 16 {
		t.Fatalf("one tensor: %v", err)
	}
	var fe *FormatError
	if _, err := parseCheckpoint("x", aliasedCheckpoint(4000, 10000)); !errors.As(err, &fe) {
		t.Fatalf("4000 offsets to one 40 kB tensor: err = %v, want a FormatError", err)
	}
}
