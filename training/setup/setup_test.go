package setup

import (
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/config"
)

// TestArtifactsPerConfiguration: a run directory keeps one artifact set
// per configuration it trained under. The first is "artifacts"; a resume
// that turns discriminators on builds its own beside it instead of
// reusing graphs without them; each configuration finds its own again.
func TestArtifactsPerConfiguration(t *testing.T) {
	orttest.Init(t)
	conf := func(params string) *config.Config {
		c, err := config.Parse([]byte(`name = "a"
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
`+params+`
[data]
kind = "synthetic"
[trainer]
max_steps = 1
`), "a.toml")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Resolve(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	run := t.TempDir()
	l1, gan := conf(""), conf("image_gan_weight = 1.0\ndisc_channels = 4\ndisc_layers = 1")
	dir1, m1, err := Artifacts(l1, run, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir2, m2, err := Artifacts(gan, run, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	again, m3, err := Artifacts(l1, run, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if dir1 != filepath.Join(run, "artifacts") || dir2 == dir1 || again != dir1 {
		t.Errorf("artifact directories %s, %s, %s: want artifacts, another, artifacts again", dir1, dir2, again)
	}
	if len(m2.Params) <= len(m1.Params) || m2.StepInput == "" || len(m3.Params) != len(m1.Params) {
		t.Errorf("parameters %d (L1), %d (GAN), %d (L1 again): the GAN set must have the discriminators and the step input", len(m1.Params), len(m2.Params), len(m3.Params))
	}
}
