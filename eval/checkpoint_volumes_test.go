package eval_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
			vol[j] = float32((j*(i+3))%200 - 100)
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
	res, err := eval.EvaluateCheckpoint(t.Context(), eval.CheckpointOptions{Checkpoint: filepath.Join(rd.Path, "checkpoints", "last")})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, row := range res.Table()[1:] {
		if len(row[0]) > 5 && row[0][:5] == "case_" {
			rows = append(rows, row[0])
		}
	}
	want := []string{"case_00000/imaging/psnr", "case_00000/imaging/ssim", "case_00001/imaging/psnr", "case_00001/imaging/ssim"}
	if !slices.Equal(rows, want) {
		t.Errorf("metric rows %v, want %v", rows, want)
	}
	if len(res.Volumes) != 2 || res.Volumes[1].ID != "case_00001/imaging" {
		t.Errorf("volumes %+v", res.Volumes)
	}
}
