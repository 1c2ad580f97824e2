package setup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/data/volumes"
)

// volumeFolder writes n 8×8×8 volumes, patient0.nii.gz …, into a new
// folder and returns it.
func volumeFolder(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var h nifti.Header
	h.Dim = [8]int64{3, 8, 8, 8, 1, 1, 1, 1}
	h.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	for i := range n {
		if err := nifti.Write(filepath.Join(dir, fmt.Sprintf("patient%d.nii.gz", i)), h, make([]float32, 512)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// volumesConfig is a resolved volumes configuration of 8³ patches with
// the overrides sets.
func volumesConfig(t *testing.T, sets ...string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(`
[data]
kind = "volumes"
[data.volumes]
patch_size = [8, 8, 8]
[model]
recipe = "vqgan3d"
[trainer]
max_steps = 1
`), "v.toml")
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

func patients(t *testing.T, train, val any) (int, int) {
	t.Helper()
	n := func(d any) int {
		if ds, ok := d.(*volumes.Dataset); ok && ds != nil {
			return len(ds.Patients())
		}
		return 0
	}
	return n(train), n(val)
}

// TestVolumesTrainSplitOnlyWithoutVal: with data.val every patient of
// data.train trains (train_split splits data.train only without it); an
// explicit train_split other than the default beside data.val is a config
// error naming both keys.
func TestVolumesTrainSplitOnlyWithoutVal(t *testing.T) {
	ten, two := volumeFolder(t, 10), volumeFolder(t, 2)
	train, val, err := Datasets(volumesConfig(t, "data.train="+ten, "data.val="+two), nil)
	if a, b := patients(t, train, val); err != nil || a != 10 || b != 2 {
		t.Errorf("data.val set: %d training and %d validation patients (%v), want 10 and 2", a, b, err)
	}
	train, val, err = Datasets(volumesConfig(t, "data.train="+ten), nil)
	if a, b := patients(t, train, val); err != nil || a != 9 || b != 1 {
		t.Errorf("no data.val: %d / %d patients (%v), want 9 / 1", a, b, err)
	}
	// The default, as a run's saved config.toml holds it, is ignored.
	train, _, err = Datasets(volumesConfig(t, "data.train="+ten, "data.val="+two, "data.volumes.train_split=0.9"), nil)
	if a, _ := patients(t, train, nil); err != nil || a != 10 {
		t.Errorf("default train_split given with data.val: %d patients, %v", a, err)
	}
	_, _, err = Datasets(volumesConfig(t, "data.train="+ten, "data.val="+two, "data.volumes.train_split=0.5"), nil)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "data.volumes.train_split" || !strings.Contains(err.Error(), "data.val = "+two) {
		t.Errorf("train_split = 0.5 with data.val: %v, want a config error naming both", err)
	}
}

// TestVolumesSmallAndEmptyFolders: three patients at the default split
// keep one for validation; one patient without data.val is a config error
// naming data.val and data.volumes.train_split; a folder without volumes
// is a config error naming the key and the folder's absolute path.
func TestVolumesSmallAndEmptyFolders(t *testing.T) {
	train, val, err := Datasets(volumesConfig(t, "data.train="+volumeFolder(t, 3)), nil)
	if a, b := patients(t, train, val); err != nil || a != 2 || b != 1 {
		t.Errorf("3 patients at 0.9: %d / %d (%v), want 2 / 1", a, b, err)
	}
	train, val, err = Datasets(volumesConfig(t, "data.train="+volumeFolder(t, 5), "data.volumes.max_patients=2"), nil)
	if a, b := patients(t, train, val); err != nil || a != 1 || b != 1 {
		t.Errorf("max_patients = 2: %d / %d (%v), want 1 / 1", a, b, err)
	}
	one := volumeFolder(t, 1)
	_, _, err = Datasets(volumesConfig(t, "data.train="+one), nil)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "data.val" || !strings.Contains(err.Error(), "data.volumes.train_split = 0.9") || !strings.Contains(err.Error(), one) {
		t.Errorf("one patient without data.val: %v", err)
	}
	if train, val, err := Datasets(volumesConfig(t, "data.train="+one, "data.volumes.train_split=1"), nil); err != nil || val != nil || train.Len() != 1 {
		t.Errorf("one patient, train_split = 1: %v", err)
	}
	empty := t.TempDir()
	os.Mkdir(filepath.Join(empty, "sub"), 0o755)
	for _, key := range []string{"data.train", "data.val"} {
		sets := []string{"data.train=" + volumeFolder(t, 2), "data.val=" + volumeFolder(t, 1)}
		sets = append(sets, key+"="+empty)
		_, _, err := Datasets(volumesConfig(t, sets...), nil)
		if !errors.As(err, &ce) || ce.Key != key || !strings.Contains(err.Error(), empty+": no volume files") {
			t.Errorf("%s without volumes: %v", key, err)
		}
	}
}

// TestVolumesSkippedFiles: with data.skip_bad_files, the files dropped at
// setup are kept with their path and why (train prints them), and the
// rest train.
func TestVolumesSkippedFiles(t *testing.T) {
	dir := volumeFolder(t, 3)
	bad := filepath.Join(dir, "bad.nii")
	os.WriteFile(bad, make([]byte, 400), 0o644)
	train, _, err := Datasets(volumesConfig(t, "data.train="+dir, "data.skip_bad_files=true", "data.volumes.train_split=1"), nil)
	if err != nil || train.Len() != 3 {
		t.Fatalf("skipping: %v", err)
	}
	sk := train.(interface{ Skipped() []error }).Skipped()
	if len(sk) != 1 || !strings.HasPrefix(sk[0].Error(), bad+": not NIfTI") {
		t.Errorf("skipped %v; want %s, not NIfTI", sk, bad)
	}
}
