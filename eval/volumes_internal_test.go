package eval

import (
	"encoding/json"
	"errors"
	"math"
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
	want := []string{"ssim", "ms_ssim"} // means no volume has
	for _, v := range []string{"case_00000/imaging", "loose"} {
		for _, m := range []string{"psnr", "ssim", "ms_ssim", "mae", "mse"} {
			want = append(want, v+"/"+m)
		}
	}
	if !slices.Equal(rows, want) {
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

// TestVolumeMeans: MS-SSIM, where a volume is large enough for it, is in
// the means, the printed table and metrics.csv like PSNR and SSIM, each
// mean counted over the volumes that have it; per volume, MAE and MSE are
// rows too, and a metric not computed reads so.
func TestVolumeMeans(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	r := CheckpointResult{Mean: map[string]float64{}, Volumes: []VolumeMetrics{
		{Name: "big.nii.gz", PSNR: 30, SSIM: f(0.9), MSSSIM: f(0.95), MAE: 1, MSE: 2.5},
		{Name: "small.nii.gz", PSNR: 20, SSIM: f(0.7), MAE: 3, MSE: 1.0 / 3},
		{Name: "thin.nii.gz", PSNR: 10, MAE: 2, MSE: 4},
	}}
	if err := r.volumeMeans(); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"psnr": 20, "ssim": 0.8, "ms_ssim": 0.95, "mae": 2, "mse": (2.5 + 1.0/3 + 4) / 3}
	for k, v := range want {
		if got, ok := r.Mean[k]; !ok || math.Abs(got-v) > 1e-12 {
			t.Errorf("mean %s = %v (%v), want %v", k, got, ok, v)
		}
	}
	if n := r.MeanOf; n["psnr"] != 3 || n["ssim"] != 2 || n["ms_ssim"] != 1 {
		t.Errorf("mean_of %v, want psnr 3, ssim 2, ms_ssim 1", n)
	}
	table := map[string]string{}
	for _, row := range r.Table()[1:] {
		table[row[0]] = row[1]
	}
	for k, v := range map[string]string{"ms_ssim": "0.95", "big/ms_ssim": "0.95", "small/ms_ssim": "not computed", "thin/ssim": "not computed",
		"small/mae": "3", "small/mse": "0.333333", "big/mse": "2.5"} {
		if table[k] != v {
			t.Errorf("printed row %s = %q, want %q", k, table[k], v)
		}
	}
	for _, row := range r.CSV()[1:] {
		if row[0] == "small/mse" && row[1] != "0.3333333333333333" {
			t.Errorf("metrics.csv small/mse = %s, want full precision", row[1])
		}
	}
	js, _ := json.Marshal(r)
	if !strings.Contains(string(js), `"ms_ssim":0.95`) || !strings.Contains(string(js), `"mean_of":{`) {
		t.Errorf("metrics.json %s: want the MS-SSIM mean and mean_of", js)
	}
}
