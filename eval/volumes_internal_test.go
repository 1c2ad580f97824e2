package eval

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data/nifti"
)

// TestVolumeIDsAreUnique: volumes found under a data folder are named by
// their path under it, so KiTS's case_*/imaging.nii.gz stay apart; files
// given one by one keep their names unless two share one.
func TestVolumeIDsAreUnique(t *testing.T) {
	root := filepath.Join("data", "kits")
	files := []string{filepath.Join(root, "case_00000", "imaging.nii.gz"), filepath.Join(root, "case_00001", "imaging.nii.gz"), filepath.Join(root, "loose.npy")}
	if got, want := volumeIDs(root, files), []string{"case_00000/imaging", "case_00001/imaging", "loose"}; !slices.Equal(got, want) {
		t.Errorf("under %s: %v, want %v", root, got, want)
	}
	if got, want := volumeIDs("", files), []string{"data/kits/case_00000/imaging", "data/kits/case_00001/imaging", "loose"}; !slices.Equal(got, want) {
		t.Errorf("given one by one: %v, want %v", got, want)
	}
	r := CheckpointResult{Volumes: []VolumeMetrics{{Name: files[0], ID: "case_00000/imaging"}, {Name: files[2]}}}
	var rows []string
	for _, row := range r.Table()[1:] {
		rows = append(rows, row[0])
	}
	if want := []string{"case_00000/imaging/psnr", "case_00000/imaging/ssim", "loose/psnr", "loose/ssim"}; !slices.Equal(rows, want) {
		t.Errorf("metric rows %v, want %v", rows, want)
	}
}

// TestValidationVolumesFolders: a data.val folder that is missing or holds
// no volumes is bad input naming data.val and the folder's absolute path;
// one that holds some lists them under it.
func TestValidationVolumesFolders(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.MkdirAll(filepath.Join(empty, "sub"), 0o755)
	var h nifti.Header
	h.Dim = [8]int64{3, 4, 4, 4, 1, 1, 1, 1}
	h.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	full := filepath.Join(dir, "full")
	os.MkdirAll(filepath.Join(full, "case_1"), 0o755)
	if err := nifti.Write(filepath.Join(full, "case_1", "imaging.nii.gz"), h, make([]float32, 64)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ val, want string }{
		{empty, "data.val: " + empty + ": no volume files"},
		{filepath.Join(dir, "nothere"), "data.val: " + filepath.Join(dir, "nothere") + ": no such file or directory"},
	} {
		cfg := config.Default()
		cfg.Data.Val = tc.val
		_, _, err := validationVolumes(cfg)
		var ie *InputError
		if err == nil || !errors.As(err, &ie) || !ie.BadInput() || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("data.val = %s: %v, want bad input saying %q", tc.val, err, tc.want)
		}
	}
	cfg := config.Default()
	cfg.Data.Val = full
	files, root, err := validationVolumes(cfg)
	if err != nil || len(files) != 1 || volumeIDs(root, files)[0] != "case_1/imaging" {
		t.Errorf("data.val = %s: %v under %s, %v", full, files, root, err)
	}
}
