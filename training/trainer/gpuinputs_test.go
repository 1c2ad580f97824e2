package trainer

import (
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

// tinyFamilies are one small run of each family the seeds train: a
// ResNet-18 at 32², a 3-D VQ-GAN on 16³ patches and a block-diffusion LM,
// four fp32 steps each. GSM8K is substituted for the LM's data.
var tinyFamilies = map[string]string{
	"resnet": `
name = "tiny-resnet"
seed = 5
[model]
recipe = "resnet"
[model.params]
depth = 18
classes = 10
image_size = 32
[data]
kind = "synthetic"
batch_size = 4
num_workers = 1
[optimizer]
name = "sgd"
lr = 0.01
momentum = 0.9
`,
	"vqgan3d": `
name = "tiny-vqgan3d"
seed = 5
[model]
recipe = "vqgan3d"
[model.params]
patch_size = [16, 16, 16]
channels = 8
channel_mult = [1, 2]
res_blocks = 1
codebook_size = 64
groups = 4
[data]
kind = "synthetic"
batch_size = 2
num_workers = 1
[optimizer]
name = "adamw"
lr = 3e-4
`,
	"bd3lm": `
name = "tiny-bd3lm"
seed = 5
[model]
recipe = "bd3lm"
[model.params]
seq_len = 64
block_size = 16
hidden = 32
layers = 1
heads = 2
[data]
kind = "tokens"
train = "GSM8K"
batch_size = 4
num_workers = 1
shuffle = false
[data.tokens]
seq_len = 64
block_size = 16
[optimizer]
name = "adamw"
lr = 3e-4
`,
}

const tinyTrainer = `
[scheduler]
name = "constant"
[trainer]
device = "cpu"
max_steps = 4
max_epochs = 0
log_every_n_steps = 1
checkpoint_every_n_steps = 0
val_check_interval = 2147483647
monitor = ""
precision = "32"
`

// tinyLosses trains a tiny family's run and returns its losses by step.
func tinyLosses(t *testing.T, family, gsm8k string) []float64 {
	t.Helper()
	c, err := config.Parse([]byte(tinyFamilies[family]+tinyTrainer), family+".toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Override(`data.train="`+gsm8k+`"`, `output_dir="`+t.TempDir()+`"`); err != nil {
		t.Fatal(err)
	}
	if c.Data.Kind != "tokens" {
		c.Data.Train = ""
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	return runConfig(t, c)
}

// TestInputsReachTheDeviceEveryStep: with the CPU provider copying bound
// host inputs when they are bound, as the CUDA provider does, each
// family's tiny run gives the same losses as with the CPU's own semantics,
// and they move. A trainer that wrote a batch or a step scalar (lr, step,
// reset, loss scale) into a bound host buffer in place would train on its
// first contents here, as it did on a GPU: the ResNet flat, the VQ-GAN's
// loss repeated, the LM's NaN.
func TestInputsReachTheDeviceEveryStep(t *testing.T) {
	orttest.Init(t)
	gsm8k := filepath.Join(t.TempDir(), "gsm8k.jsonl")
	if err := synthetic.WriteGSM8K(gsm8k, 32, 1); err != nil {
		t.Fatal(err)
	}
	for _, family := range []string{"resnet", "vqgan3d", "bd3lm"} {
		t.Run(family, func(t *testing.T) {
			was := ort.SetBindTimeCopy(false)
			cpu := tinyLosses(t, family, gsm8k)
			ort.SetBindTimeCopy(true)
			gpu := tinyLosses(t, family, gsm8k)
			ort.SetBindTimeCopy(was)
			t.Logf("losses %v, with bind-time copies %v", cpu, gpu)
			if len(cpu) != 4 || len(gpu) != 4 {
				t.Fatalf("%d and %d steps, want 4", len(cpu), len(gpu))
			}
			for i := range cpu {
				if !finite(gpu[i]) || gpu[i] != cpu[i] {
					t.Errorf("step %d: loss %g with bind-time copies, %g without", i+1, gpu[i], cpu[i])
				}
			}
			if cpu[3] == cpu[0] || cpu[2] == cpu[1] {
				t.Errorf("losses %v do not move", cpu)
			}
		})
	}
}
