package setup

import (
	"archive/zip"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data/npy"
)

// TestArraysDatasets: data.kind = "arrays" opens data.train (and data.val
// when set; no validation without it) for the model's inputs; what does
// not fit is a config error on the key naming the file, whether the
// arrays refuse it when opened or CheckData when it compares them with
// the model (a batch fixed at export); arrays held in memory count
// against data.memory_limit.
func TestArraysDatasets(t *testing.T) {
	root := t.TempDir()
	write := func(dir string, n int) {
		os.MkdirAll(dir, 0o755)
		if err := npy.Write(filepath.Join(dir, "x.npy"), []int{n, 3}, make([]float32, 3*n)); err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, 8*n)
		for i := range n {
			binary.LittleEndian.PutUint64(raw[8*i:], uint64(i%2))
		}
		if err := os.WriteFile(filepath.Join(dir, "label.npy"), npy.Encode("<i8", false, []int{n}, raw), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	train, val := filepath.Join(root, "train"), filepath.Join(root, "val")
	write(train, 10)
	write(val, 4)
	conf := func(sets ...string) *config.Config {
		c, err := config.Parse([]byte("name = \"a\"\n[model]\nonnx = \"m.onnx\"\nloss = \"cross_entropy\"\n[data]\nkind = \"arrays\"\ntrain = \""+train+"\"\nbatch_size = 2\n[trainer]\nmax_steps = 1\nmonitor = \"\"\n"), "a.toml")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Override(sets...); err != nil {
			t.Fatal(err)
		}
		if err := c.Resolve(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	m := &artifacts.Manifest{Classes: 2, Data: []artifacts.Tensor{
		{Name: "x", DType: "float32", Shape: []int64{-1, 3}},
		{Name: "target", DType: "int64", Shape: []int64{-1}},
	}}
	tr, vl, err := Datasets(conf(), m)
	if err != nil || tr.Len() != 10 || vl != nil {
		t.Fatalf("data.train alone: %v, %v, %v; want 10 samples and no validation", tr, vl, err)
	}
	if err := CheckData(conf(), m, tr, vl); err != nil {
		t.Errorf("CheckData: %v", err)
	}
	tr, vl, err = Datasets(conf(`data.val="`+val+`"`), m)
	if err != nil || vl == nil || vl.Len() != 4 {
		t.Fatalf("with data.val: %v, %v", vl, err)
	}

	var ce *config.Error
	os.WriteFile(filepath.Join(val, "notes.txt"), nil, 0o644)
	if _, _, err := Datasets(conf(`data.val="`+val+`"`), m); !errors.As(err, &ce) || ce.Key != "data.val" || !strings.Contains(err.Error(), filepath.Join(val, "notes.txt")) {
		t.Errorf("a stray file in data.val: %v; want a config error on data.val naming it", err)
	}
	fixed := &artifacts.Manifest{Data: []artifacts.Tensor{{Name: "x", DType: "float32", Shape: []int64{4, 3}}, m.Data[1]}}
	if err := CheckData(conf(), fixed, tr, nil); !errors.As(err, &ce) || ce.Key != "data.batch_size" ||
		!strings.Contains(err.Error(), `the model's input "x" (fed by `+filepath.Join(train, "x.npy")+") was exported with a fixed batch of 4") {
		t.Errorf("a fixed batch: %v", err)
	}
	// The rank CheckData sees where the arrays know no shape (plan's
	// model by name only is not refused; a manifest disagreeing is).
	other := &artifacts.Manifest{Data: []artifacts.Tensor{{Name: "x", DType: "float32", Shape: []int64{-1, 3, 1, 1}}, m.Data[1]}}
	if err := CheckData(conf(), other, tr, nil); !errors.As(err, &ce) || ce.Key != "data.train" || !strings.Contains(err.Error(), filepath.Join(train, "x.npy")) {
		t.Errorf("another rank: %v; want a config error on data.train naming x.npy", err)
	}

	// np.savez_compressed's members are decompressed into memory.
	npz := filepath.Join(root, "packed.npz")
	f, _ := os.Create(npz)
	z := zip.NewWriter(f)
	for _, name := range []string{"x.npy", "label.npy"} {
		b, _ := os.ReadFile(filepath.Join(train, name))
		w, _ := z.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate})
		w.Write(b)
	}
	z.Close()
	f.Close()
	if _, _, err := Datasets(conf(`data.train="`+npz+`"`), m); err != nil {
		t.Errorf("a compressed archive: %v", err)
	}
	// No workers: the loader holds one batch, whose index fits in the limit.
	if _, _, err := Datasets(conf(`data.train="`+npz+`"`, `data.memory_limit=100`, "data.num_workers=0"), m); !errors.As(err, &ce) || ce.Key != "data.train" ||
		!strings.Contains(err.Error(), "label.npy, x.npy must be held in memory") || !strings.Contains(err.Error(), "data.memory_limit") {
		t.Errorf("over data.memory_limit: %v", err)
	}
}
