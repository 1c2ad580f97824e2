package setup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/graph"
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

// TestArtifactsWithoutTheModelFile: a run trained from model.onnx keeps
// its artifacts; eval, export and resume find them there after the ONNX
// file has moved, and only a build needs the file.
func TestArtifactsWithoutTheModelFile(t *testing.T) {
	orttest.Init(t)
	rm, err := models.Build("resnet", map[string]any{"depth": int64(18), "width": int64(4), "classes": int64(3), "image_size": int64(32)})
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "resnet.onnx")
	if err := rm.Graph.Save(model, graph.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse([]byte("name = \"a\"\n[model]\nonnx = \""+model+"\"\nloss = \"cross_entropy\"\n[data]\nkind = \"synthetic\"\n[trainer]\nmax_steps = 1\n"), "a.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	built, _, err := Artifacts(c, run, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(model); err != nil {
		t.Fatal(err)
	}
	if again, _, err := Artifacts(c, run, ort.Options{}); err != nil || again != built {
		t.Errorf("the run's own artifacts without the model file: %s, %v; want %s", again, err, built)
	}
	var ce *config.Error
	if _, _, err := Artifacts(c, t.TempDir(), ort.Options{}); !errors.As(err, &ce) || ce.Key != "model.onnx" {
		t.Errorf("a new build without the model file: %v; want a config error on model.onnx", err)
	}
}

// TestConvGradForm: model.conv_grad chooses how the training graph writes
// convolution gradients; unset, the device's form (offsets on the CPU,
// whose input gradients are Convs: no ConvTranspose by a layer's weight,
// only the 1×1 ones that put a strided window's zeros in).
func TestConvGradForm(t *testing.T) {
	orttest.Init(t)
	for _, c := range []struct {
		form           string
		convTransposes bool
	}{{"", false}, {"offsets", false}, {"ops", true}, {"gemm", true}} {
		cfg, err := config.Parse([]byte(`name = "a"
[model]
recipe = "resnet"
conv_grad = "`+c.form+`"
[model.params]
depth = 18
width = 4
classes = 3
image_size = 32
[data]
kind = "synthetic"
[trainer]
max_steps = 1
`), "a.toml")
		if err == nil {
			err = cfg.Resolve()
		}
		if err != nil {
			t.Fatal(err)
		}
		dir, _, err := Artifacts(cfg, t.TempDir(), ort.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g, err := graph.Load(filepath.Join(dir, "training.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, node := range g.Nodes {
			if node.Op == "ConvTranspose" && !strings.HasPrefix(node.Input(1), "ortrain/conv/spread/") {
				n++
			}
		}
		if (n > 0) != c.convTransposes {
			t.Errorf("model.conv_grad %q: %d ConvTranspose nodes, want some: %v", c.form, n, c.convTransposes)
		}
	}
}
