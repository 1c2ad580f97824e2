package eval_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/rundir"
	"github.com/ortrain/ortrain/training/setup"
	"github.com/ortrain/ortrain/training/trainer"
)

// TestCheckpointRowsNameVolumesByPath: `eval --checkpoint` of a
// one-folder-per-patient validation set (KiTS's case_*/imaging.nii.gz)
// names each volume's metric rows by its path under data.val, not by the
// file name the cases share.
func TestCheckpointRowsNameVolumesByPath(t *testing.T) {
	orttest.Init(t)
	kits := t.TempDir()
	var h nifti.Header
	h.Dim = [8]int64{3, 12, 12, 12, 1, 1, 1, 1}
	h.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	for i := range 2 {
		p := filepath.Join(kits, fmt.Sprintf("case_%05d", i), "imaging.nii.gz")
		os.MkdirAll(filepath.Dir(p), 0o755)
		vol := make([]float32, 12*12*12)
		for j := range vol {
			vol[j] = float32((j*(i+3))%250 - 125) // some outside the window
		}
		if err := nifti.Write(p, h, vol); err != nil {
			t.Fatal(err)
		}
	}
	c, err := config.Parse([]byte(`name = "vq"
output_dir = "`+t.TempDir()+`"
[model]
recipe = "vqgan3d"
[model.params]
patch_size = [8, 8, 8]
channels = 4
channel_mult = [1, 2]
res_blocks = 1
z_channels = 4
embed_dim = 4
codebook_size = 16
groups = 2
[data]
kind = "volumes"
train = "`+kits+`"
val = "`+kits+`"
num_workers = 0
[data.volumes]
patch_size = [8, 8, 8]
window = [-100, 100]
[trainer]
device = "cpu"
max_steps = 1
`), "vq.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	rd, err := rundir.New(c.OutputDir, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	art, m, err := setup.Artifacts(c, rd.Path, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	train, val, err := setup.Datasets(c, m)
	if err != nil {
		t.Fatal(err)
	}
	opts, _ := c.SessionOptions(false)
	tr, err := trainer.New(trainer.Options{Config: c, Artifacts: art, Session: opts, Train: train, Val: val, Dir: rd})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(rd.Path, "checkpoints", "last")
	res, err := eval.EvaluateCheckpoint(t.Context(), eval.CheckpointOptions{Checkpoint: ck})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, row := range res.Table()[1:] {
		if len(row[0]) > 5 && row[0][:5] == "case_" {
			rows = append(rows, row[0])
		}
	}
	var want []string
	for _, c := range []string{"case_00000", "case_00001"} {
		for _, m := range []string{"psnr", "ssim", "ms_ssim", "mae", "mse"} {
			want = append(want, c+"/imaging/"+m)
		}
	}
	if !slices.Equal(rows, want) {
		t.Errorf("metric rows %v, want %v", rows, want)
	}
	if len(res.Volumes) != 2 || res.Volumes[1].ID != "case_00001/imaging" {
		t.Errorf("volumes %+v", res.Volumes)
	}
	// The window is recorded with the clamping of the reference to it, and
	// the data range is its width.
	if res.Window == nil || *res.Window != [2]float64{-100, 100} || res.ReferenceClipped == nil || !*res.ReferenceClipped ||
		res.Volumes[0].DataRange != 200 || res.Volumes[0].Clipped == nil || *res.Volumes[0].Clipped == 0 {
		t.Errorf("window %v, reference clipped %v, data range %g, clipped voxels %v; want [-100, 100], true, 200 and some",
			res.Window, res.ReferenceClipped, res.Volumes[0].DataRange, res.Volumes[0].Clipped)
	}
	js, _ := json.Marshal(res)
	for _, key := range []string{`"window":[-100,100]`, `"reference_clipped":true`, `"clipped_voxels":`, `"mean_of":{`} {
		if !strings.Contains(string(js), key) {
			t.Errorf("metrics.json lacks %s: %s", key, js)
		}
	}

	// --data-range: PSNR and SSIM with that range, recorded; a range far
	// below the data's is warned of. Progress is heard per volume.
	var progress []eval.VolumeProgress
	var warnings []string
	res2, err := eval.EvaluateCheckpoint(t.Context(), eval.CheckpointOptions{Checkpoint: ck, DataRange: 2,
		VolumeProgress: func(p eval.VolumeProgress) { progress = append(progress, p) },
		Warn:           func(s string) { warnings = append(warnings, s) }})
	if err != nil {
		t.Fatal(err)
	}
	v, v2 := res.Volumes[0], res2.Volumes[0]
	if v2.DataRange != 2 || res2.DataRange != 2 || math.Abs(v2.PSNR-(v.PSNR+20*math.Log10(2.0/200))) > 1e-9 || v2.MAE != v.MAE || *v2.SSIM == *v.SSIM {
		t.Errorf("with --data-range 2: data range %g (result %g), PSNR %g (%g with 200), SSIM %g (%g); want 2, PSNR lower by 40 dB, another SSIM",
			v2.DataRange, res2.DataRange, v2.PSNR, v.PSNR, *v2.SSIM, *v.SSIM)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "--data-range 2 is 100 times smaller") {
		t.Errorf("warnings %q; want one per volume on a data range 100 times below the window's", warnings)
	}
	// 12³ padded to 8³ windows every 6 voxels: starts 0, 4 per axis.
	if len(progress) < 4 || progress[0].Done != 0 || progress[0].Windows != 8 || progress[0].Index != 1 || progress[0].Volumes != 2 ||
		progress[len(progress)-1].Done != 8 || progress[len(progress)-1].Index != 2 {
		t.Errorf("progress %+v; want each volume's 8 windows from 0 to 8", progress)
	}

	// A volume model measures volumes only; a constant volume without a
	// window has no range to window: refused naming the window setting.
	flat := filepath.Join(t.TempDir(), "flat.nii.gz")
	if err := nifti.Write(flat, h, make([]float32, 12*12*12)); err != nil {
		t.Fatal(err)
	}
	_, err = eval.EvaluateCheckpoint(t.Context(), eval.CheckpointOptions{Checkpoint: ck, Sets: []string{"data.volumes.window=[]"}, Inputs: []string{flat}})
	var ie *eval.InputError
	if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), flat) || !strings.Contains(err.Error(), "data.volumes.window") {
		t.Errorf("a constant volume without a window: %v; want bad input naming it and data.volumes.window", err)
	}
}
