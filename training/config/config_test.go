package config

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const minimal = `
name = "tiny"
[model]
recipe = "resnet"
[data]
kind = "synthetic"
batch_size = 8
[trainer]
max_steps = 100
`

func mustParse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc), "test.toml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func badInput(err error) bool {
	var b interface{ BadInput() bool }
	return errors.As(err, &b) && b.BadInput()
}

// TestParseErrors checks that malformed files name the file, line and key.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"unknown top-level key", "nmae = 1\n" + minimal, []string{"test.toml", "nmae", "unknown key", "did you mean name?"}},
		{"unknown nested key", minimal + "\n[optimizer]\nbeta = [0.9, 0.99]\n", []string{"test.toml", "optimizer.beta", "unknown key", "optimizer.betas"}},
		{"wrong type", "[trainer]\nmax_steps = \"ten\"\n", []string{"test.toml:2", "trainer.max_steps", "a string where an integer is wanted"}},
		{"syntax error", "[trainer\nmax_steps = 1\n", []string{"test.toml:", "table name"}},
		{"bad byte size", "[data]\nmemory_limit = \"8 gigs\"\n", []string{"test.toml:2", "data.memory_limit", "not a byte size"}},
		{"fraction above one", "[trainer]\nval_check_interval = 1.5\n", []string{"test.toml:2", "trainer.val_check_interval", "(0, 1]"}},
		{"bad precision", "[trainer]\nprecision = \"fp8\"\n", []string{"test.toml:2", "trainer.precision", "fp8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "test.toml")
			if err == nil {
				t.Fatal("Parse accepted the file")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !badInput(err) {
				t.Errorf("error %v does not report BadInput", err)
			}
		})
	}
}

// TestResolveErrors checks that impossible combinations are refused with an
// error naming the keys involved.
func TestResolveErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want []string
	}{
		{"no run length", []string{"trainer.max_steps=0"}, []string{"trainer.max_epochs", "trainer.max_steps"}},
		{"warmup beyond max_steps", []string{"scheduler.warmup_steps=200"}, []string{"scheduler.warmup_steps", "trainer.max_steps = 100"}},
		{"accumulate below one", []string{"trainer.accumulate_grad_batches=0"}, []string{"--set trainer.accumulate_grad_batches", "≥ 1"}},
		{"monitor without mode", []string{`trainer.monitor="val/loss"`}, []string{"trainer.mode", "val/loss"}},
		{"mode without monitor", []string{`trainer.mode="max"`}, []string{"trainer.monitor"}},
		{"both warmups", []string{"scheduler.warmup_steps=10", "scheduler.warmup_ratio=0.1"}, []string{"scheduler.warmup_ratio", "not both"}},
		{"scaling without base", []string{"trainer.lr_scaling=sqrt"}, []string{"trainer.base_batch_size", "sqrt"}},
		{"tf32 with strict fp32", []string{"runtime.use_tf32=true"}, []string{"runtime.use_tf32", `"32"`}},
		{"bad device", []string{"trainer.device=tpu"}, []string{"trainer.device", "tpu"}},
		{"momentum with adamw", []string{"optimizer.momentum=0.9"}, []string{"optimizer.momentum", "sgd"}},
		{"min_lr above lr", []string{"scheduler.min_lr=1.0"}, []string{"scheduler.min_lr"}},
		{"patience without monitor", []string{"trainer.early_stopping_patience=3"}, []string{"trainer.early_stopping_patience", "monitor"}},
		{"volumes need a patch", []string{"data.kind=volumes", "data.train=/x"}, []string{"data.volumes.patch_size"}},
		{"block must divide seq", []string{"data.kind=tokens", "data.train=/x", "data.tokens.seq_len=100", "data.tokens.block_size=16"}, []string{"data.tokens.block_size", "100"}},
		{"segments must add up to seq_len", []string{"data.kind=tokens", "data.train=/x", "data.tokens.seq_len=64", "data.tokens.block_size=0", "data.tokens.segments=[16,16,16]"}, []string{"data.tokens.segments", "64"}},
		{"segments are three", []string{"data.kind=tokens", "data.train=/x", "data.tokens.seq_len=64", "data.tokens.block_size=0", "data.tokens.segments=[32,32]"}, []string{"data.tokens.segments", "question, plan, execution"}},
		{"segments exclude blocks", []string{"data.kind=tokens", "data.train=/x", "data.tokens.seq_len=64", "data.tokens.block_size=16", "data.tokens.segments=[16,16,32]"}, []string{"data.tokens.block_size", "must be 0"}},
		{"real data needs a path", []string{"data.kind=images", "data.images.size=224"}, []string{"data.train", "images"}},
		{"both artifacts and recipe", []string{"model.artifacts=/a"}, []string{"model.artifacts", "not both"}},
		{"nan clip threshold", []string{"trainer.gradient_clip_val=nan"}, []string{"trainer.gradient_clip_val", "not a finite number"}},
		{"Lightning's -1 epochs", []string{"trainer.max_epochs=-1"}, []string{"trainer.max_epochs", "Lightning's -1"}},
		{"clip by value", []string{"trainer.gradient_clip_val=1", `trainer.gradient_clip_algorithm="value"`}, []string{"trainer.gradient_clip_algorithm", "not built"}},
		{"infinite lr", []string{"optimizer.lr=inf"}, []string{"optimizer.lr", "not a finite number"}},
		{"label smoothing without an onnx cross-entropy", []string{"model.label_smoothing=0.1"}, []string{"model.label_smoothing", "cross_entropy"}},
		{"negative devices", []string{"trainer.devices=-1"}, []string{"trainer.devices"}},
		{"antithetic sampling of volumes", []string{"data.kind=volumes", "data.train=/x", "data.volumes.patch_size=[8,8,8]", "data.tokens.antithetic_sampling=true"}, []string{"data.tokens.antithetic_sampling", "volumes"}},
		{"negative num_nodes", []string{"trainer.num_nodes=-2"}, []string{"trainer.num_nodes"}},
		{"unknown strategy", []string{`trainer.strategy="fsdp"`}, []string{"trainer.strategy", "ddp"}},
		{"noise clip above its top", []string{"data.kind=tokens", "data.train=/x", "data.tokens.seq_len=64", "data.tokens.block_size=16", "data.tokens.sampling_eps_min=0.5", "data.tokens.sampling_eps_max=0.4"}, []string{"data.tokens.sampling_eps_min", "[0.5, 0.4)"}},
		{"random erasing of volumes", []string{"data.kind=volumes", "data.train=/x", "data.volumes.patch_size=[8,8,8]", "data.images.random_erase=0.1"}, []string{"data.images.random_erase", "volumes"}},
		{"mixup of tokens", []string{"data.kind=tokens", "data.train=/x", "data.tokens.seq_len=64", "data.tokens.block_size=16", "data.images.mixup_alpha=0.2"}, []string{"data.images.mixup_alpha", "tokens"}},
		{"unknown auto-augment policy", []string{"data.kind=images", "data.train=/x", "data.images.size=32", `data.images.auto_augment="autoaugment"`}, []string{"data.images.auto_augment", "autoaugment", "trivialaugment, randaugment"}},
		{"randaugment magnitude above 30", []string{"data.kind=images", "data.train=/x", "data.images.size=32", `data.images.auto_augment="randaugment"`, "data.images.randaugment_m=31"}, []string{"data.images.randaugment_m", "[0, 30]", "31"}},
		{"randaugment magnitude below 0", []string{"data.kind=images", "data.train=/x", "data.images.size=32", `data.images.auto_augment="randaugment"`, "data.images.randaugment_m=-1"}, []string{"data.images.randaugment_m", "[0, 30]"}},
		{"randaugment without ops", []string{"data.kind=images", "data.train=/x", "data.images.size=32", `data.images.auto_augment="randaugment"`, "data.images.randaugment_n=0"}, []string{"data.images.randaugment_n", "≥ 1"}},
		{"randaugment magnitude for trivialaugment", []string{"data.kind=images", "data.train=/x", "data.images.size=32", `data.images.auto_augment="trivialaugment"`, "data.images.randaugment_m=15"}, []string{"data.images.randaugment_m", `auto_augment = "randaugment"`, "trivialaugment"}},
		{"auto-augment of volumes", []string{"data.kind=volumes", "data.train=/x", "data.volumes.patch_size=[8,8,8]", `data.images.auto_augment="trivialaugment"`}, []string{"data.images.auto_augment", "volumes"}},
		{"randaugment ops for tokens", []string{"data.kind=tokens", "data.train=/x", "data.tokens.seq_len=64", "data.tokens.block_size=16", "data.images.randaugment_n=3"}, []string{"data.images.randaugment_n", "tokens"}},
		{"unknown recompute", []string{`model.recompute="layers"`}, []string{"model.recompute", "layers", "blocks"}},
		{"loss scale beyond float32", []string{`trainer.precision="16-mixed"`, "trainer.loss_scale_init=1e39"}, []string{"trainer.loss_scale_init", "float32"}},
		{"betas with sgd", []string{"optimizer.name=sgd", "optimizer.betas=[0.5,0.5]"}, []string{"optimizer.betas", "sgd"}},
		{"eps with sgd", []string{"optimizer.name=sgd", "optimizer.eps=0.5"}, []string{"optimizer.eps", "sgd"}},
		{"base batch without scaling", []string{"trainer.base_batch_size=8"}, []string{"trainer.base_batch_size", `lr_scaling = "none"`}},
		{"min_lr of a constant schedule", []string{"scheduler.min_lr=1e-4"}, []string{"scheduler.min_lr", "constant"}},
		{"tf32 without tf32", []string{`trainer.precision="tf32"`, "runtime.use_tf32=false"}, []string{"runtime.use_tf32", "tf32"}},
		{"zero devices", []string{"trainer.devices=0"}, []string{"trainer.devices", "≥ 1"}},
		{"recompute for prebuilt artifacts", []string{`model.recipe=""`, `model.artifacts="/a"`, `model.recompute="blocks"`}, []string{"model.recompute", "artifacts build --recompute"}},
		{"unknown conv gradient form", []string{`model.conv_grad="im2col"`}, []string{"model.conv_grad", "im2col", "gemm"}},
		{"CUDA graphs", []string{`runtime.enable_cuda_graph=true`}, []string{"runtime.enable_cuda_graph", "not supported", "set it to false"}},
		{"prefer_nhwc with ConvTranspose input gradients", []string{`runtime.prefer_nhwc=true`}, []string{"runtime.prefer_nhwc", `model.conv_grad = "offsets"`}},
		{"conv gradient form for prebuilt artifacts", []string{`model.recipe=""`, `model.artifacts="/a"`, `model.conv_grad="ops"`}, []string{"model.conv_grad", "artifacts build --conv-grad"}},
		{"frozen for prebuilt artifacts", []string{`model.recipe=""`, `model.artifacts="/a"`, `model.frozen=["enc.*"]`}, []string{"model.frozen", "artifacts build --frozen"}},
		{"trainable for prebuilt artifacts", []string{`model.recipe=""`, `model.artifacts="/a"`, `model.trainable=["head.*"]`}, []string{"model.trainable", "prebuilt artifacts"}},
		// Absurd counts, refused before a loader, a step or a thread pool
		// is sized from them (#34: each panicked, hung or failed unnamed).
		{"batch of 10^18", []string{"data.batch_size=1000000000000000000"}, []string{"data.batch_size", "does not fit in memory", "at most"}},
		{"batch of 10^12", []string{"data.batch_size=1000000000000"}, []string{"data.batch_size", "does not fit in memory"}},
		{"batch over data.memory_limit", []string{"data.batch_size=1000000", `data.memory_limit="1MiB"`}, []string{"data.batch_size", "1.0 MiB of data.memory_limit", "at most 10082"}},
		{"10^18 workers", []string{"data.num_workers=1000000000000000000"}, []string{"data.num_workers", "at most 1024"}},
		{"10^18 prefetch", []string{"data.prefetch=1000000000000000000"}, []string{"data.prefetch", "at most 1024"}},
		{"10^18 accumulated batches", []string{"trainer.accumulate_grad_batches=1000000000000000000"}, []string{"trainer.accumulate_grad_batches", "at most 65536"}},
		{"10^9 intra-op threads", []string{"runtime.intra_op_threads=1000000000"}, []string{"runtime.intra_op_threads", "at most 1024 threads"}},
		{"10^18 epochs", []string{"trainer.max_epochs=1000000000000000000"}, []string{"trainer.max_epochs", "at most 2147483647"}},
		{"10^9 inter-op threads", []string{"runtime.inter_op_threads=1000000000"}, []string{"runtime.inter_op_threads", "at most 1024 threads"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, minimal)
			if err := c.Override(tc.sets...); err != nil {
				t.Fatalf("Override: %v", err)
			}
			err := c.Resolve()
			if err == nil {
				t.Fatal("Resolve accepted the configuration")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !badInput(err) {
				t.Errorf("error %v does not report BadInput", err)
			}
		})
	}
}

// TestOverride checks that --set values are read as TOML, that bare words
// become strings and that bad overrides name the --set key.
func TestOverride(t *testing.T) {
	c := mustParse(t, minimal)
	err := c.Override(
		"trainer.max_steps=10",
		"optimizer.betas=[0.9,0.95]",
		`trainer.device="cuda:0"`,
		"runtime.gpu_mem_limit=8GiB",
		"trainer.val_check_interval=0.25",
		"model.params.width=64",
		"model.params.act=gelu",
	)
	if err != nil {
		t.Fatal(err)
	}
	if c.Trainer.MaxSteps != 10 || !reflect.DeepEqual(c.Optimizer.Betas, []float64{0.9, 0.95}) ||
		c.Trainer.Device != "cuda:0" || c.Runtime.GPUMemLimit != 8<<30 || c.Trainer.ValCheckInterval.Fraction != 0.25 {
		t.Errorf("overrides not applied: %+v %+v", c.Trainer, c.Optimizer)
	}
	if c.Model.Params["width"] != int64(64) || c.Model.Params["act"] != "gelu" {
		t.Errorf("model.params = %v", c.Model.Params)
	}
	if err := c.Override("trainer.device=cuda:1"); err != nil || c.Trainer.Device != "cuda:1" {
		t.Errorf("bare word: err %v, device %q", err, c.Trainer.Device)
	}
	if err := c.Override("trainer.val_check_interval=200"); err != nil || c.Trainer.ValCheckInterval != (Interval{Steps: 200}) {
		t.Errorf("integer interval: err %v, %+v", err, c.Trainer.ValCheckInterval)
	}
	for _, tc := range []struct{ set, want string }{
		{"trainer.max_stepz=3", "--set trainer.max_stepz: unknown key (did you mean trainer.max_steps?)"},
		{"trainer.max_steps=lots", "--set trainer.max_steps"},
		{"trainer.sync_batchnorm=true", "--set trainer.sync_batchnorm: not built: synchronised BatchNorm"},
		{`trainer.accelerator="gpu"`, "--set trainer.accelerator: unknown key; Lightning's name for trainer.device"},
		{`optimizer.betas="(0.9,0.95)"`, "--set optimizer.betas: a string where a list is wanted (write [0.9, 0.95]"},
		{"trainer.max_steps=1e3", "--set trainer.max_steps: a float where an integer is wanted"},
		{`trainer.max_time="00:12:00:00"`, "--set trainer.max_time: not built: a time limit"},
		{"trainer.devices=[0,1]", "--set trainer.devices: a list of GPU indices, as Lightning's devices = [0, 1]: ortrain takes the number of devices per node"},
		{`trainer.devices="auto"`, `--set trainer.devices: Lightning's "auto" (or another string): ortrain takes the number of devices per node`},
		{"trainer.max_steps=[1]", "--set trainer.max_steps: a list where an integer is wanted"},
		{`trainer.precision="fp8"`, `--set trainer.precision: precision "fp8"`},
		{`trainer.precision=[16]`, `--set trainer.precision: precision must be a string like "bf16-mixed", not a list`},
		{"trainer.max_steps", "want key.sub=value"},
		{"trainer..x=1", "want key.sub=value"},
	} {
		err := c.Override(tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !badInput(err) {
			t.Errorf("Override(%q) = %v, want an error containing %q", tc.set, err, tc.want)
		}
	}
}

// TestResolveDefaults checks the derived defaults.
func TestResolveDefaults(t *testing.T) {
	c := mustParse(t, `
[model]
recipe = "vqgan3d"
[data]
kind = "volumes"
train = "/data"
volumes.patch_size = [64, 64, 64]
[trainer]
max_epochs = 3
precision = "bf16"
[optimizer]
name = "sgd"
momentum = 0.9
`)
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"name from recipe", c.Name, "vqgan3d"},
		{"stride from patch", c.Data.Volumes.Stride, []int{64, 64, 64}},
		{"precision normalised", c.Trainer.Precision, BF16Mixed},
		{"tf32 follows precision", c.Runtime.UseTF32, true},
		{"sgd weight decay", c.Optimizer.WeightDecay, 0.0},
		{"shuffle default", c.Data.Shuffle, true},
		{"output dir", c.OutputDir, "outputs"},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, tc.got, tc.want)
		}
	}
}

// TestNoiseClipAlone: sampling_eps_min alone clips t to [min, 1).
func TestNoiseClipAlone(t *testing.T) {
	c := mustParse(t, minimal)
	if err := c.Override("data.kind=tokens", "data.train=/x", "data.tokens.seq_len=64", "data.tokens.block_size=16", "data.tokens.sampling_eps_min=1e-3"); err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if tk := c.Data.Tokens; tk.SamplingEpsMin != 1e-3 || tk.SamplingEpsMax != 1 {
		t.Errorf("noise range [%g, %g), want [0.001, 1)", tk.SamplingEpsMin, tk.SamplingEpsMax)
	}
}

// TestEncodeRoundTrip checks that the encoded resolved config reads back to
// the same config and hash, and that Hash ignores volatile keys only.
func TestEncodeRoundTrip(t *testing.T) {
	c := mustParse(t, minimal)
	if err := c.Override("trainer.val_check_interval=0.5", "data.memory_limit=1GiB", "model.params.depth=3", `trainer.monitor="val/loss"`, "trainer.mode=min"); err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	text, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Load(path)
	if err != nil {
		t.Fatalf("reading the encoded config back: %v\n%s", err, text)
	}
	if err := d.Resolve(); err != nil {
		t.Fatal(err)
	}
	if diff, _ := Diff(c, d); len(diff) != 0 {
		t.Errorf("round trip changed %v", diff)
	}
	h1, _ := c.Hash()
	h2, _ := d.Hash()
	if h1 != h2 || len(h1) != 64 {
		t.Errorf("hashes %q and %q differ", h1, h2)
	}
	for _, tc := range []struct {
		set     string
		changes bool
	}{
		{"trainer.max_steps=500", false},
		{"trainer.device=cpu", false},
		{"runtime.intra_op_threads=3", false},
		{"data.num_workers=9", false},
		{"optimizer.lr=0.5", true},
		{"seed=7", true},
		{"data.batch_size=4", true},
		{"model.params.depth=4", true},
	} {
		e, _ := Load(path)
		if err := e.Override(tc.set); err != nil {
			t.Fatal(err)
		}
		h, _ := e.Hash()
		if (h != h1) != tc.changes {
			t.Errorf("--set %s: hash changed = %v, want %v", tc.set, h != h1, tc.changes)
		}
	}
}

// TestSavedConfigLoads: a run's config.toml writes every key, those that
// do not apply included (an sgd run's betas and eps, a constant
// schedule's min_lr, base_batch_size without scaling, an unset
// loss_scale_init as older versions wrote it); it reads back and resolves.
func TestSavedConfigLoads(t *testing.T) {
	for _, sets := range [][]string{
		{"optimizer.name=sgd", "optimizer.momentum=0.9"},
		{`trainer.precision="tf32"`},
		{`trainer.precision="16-mixed"`},
		{"trainer.lr_scaling=linear", "trainer.base_batch_size=4", "trainer.devices=2"},
	} {
		c := mustParse(t, minimal)
		if err := c.Override(sets...); err != nil {
			t.Fatal(err)
		}
		if err := c.Resolve(); err != nil {
			t.Fatalf("%v: %v", sets, err)
		}
		text, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		text = append(text, "\n"...)
		d, err := Parse(text, "config.toml")
		if err == nil {
			err = d.Merge([]byte("[trainer]\nloss_scale_init = 0.0\n"), "older config.toml")
		}
		if err == nil {
			err = d.Resolve()
		}
		if err != nil {
			t.Errorf("%v: the saved configuration does not load: %v\n%s", sets, err, text)
		}
	}
}

// TestAutoAugmentKeys: RandAugment at bin 0 resolves and survives an
// encode and read back (0 is a magnitude, not "unset"); a configuration
// without the keys encodes without them, so its hash, which checkpoints
// store for resuming, is what it was before the keys existed; and they
// change the hash when set.
func TestAutoAugmentKeys(t *testing.T) {
	images := []string{"data.kind=images", "data.train=/x", "data.images.size=32"}
	c := mustParse(t, minimal)
	if err := c.Override(append(images, `data.images.auto_augment="randaugment"`, "data.images.randaugment_m=0")...); err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	text, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(text, "encoded")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Resolve(); err != nil {
		t.Fatal(err)
	}
	if n, m := d.Data.Images.RandAugment(); n != 2 || m != 0 || d.Data.Images.AutoAugment != "randaugment" {
		t.Errorf("read back: %q with n %d, m %d; want randaugment, 2, 0", d.Data.Images.AutoAugment, n, m)
	}

	plain := mustParse(t, minimal)
	if err := plain.Override(images...); err != nil {
		t.Fatal(err)
	}
	if err := plain.Resolve(); err != nil {
		t.Fatal(err)
	}
	text, _ = plain.Encode()
	for _, key := range []string{"auto_augment", "randaugment_n", "randaugment_m"} {
		if strings.Contains(string(text), key) {
			t.Errorf("a configuration without %s encodes it:\n%s", key, text)
		}
	}
	h0, _ := plain.Hash()
	for _, set := range [][]string{{`data.images.auto_augment="trivialaugment"`}, {`data.images.auto_augment="randaugment"`}, {`data.images.auto_augment="randaugment"`, "data.images.randaugment_m=10"}} {
		e := mustParse(t, minimal)
		if err := e.Override(append(images, set...)...); err != nil {
			t.Fatal(err)
		}
		if h, _ := e.Hash(); h == h0 {
			t.Errorf("--set %v leaves the hash as it was", set)
		}
	}
}

// TestScaleLR checks the LR scaling rules, including the seeds' example:
// 3e-4 tuned at 128 becomes 6e-4 at 512 with sqrt scaling.
func TestScaleLR(t *testing.T) {
	for _, tc := range []struct {
		lr          float64
		batch, base int
		rule        string
		want        float64
	}{
		{3e-4, 512, 128, "sqrt", 6e-4},
		{3e-4, 512, 128, "linear", 1.2e-3},
		{3e-4, 512, 128, "none", 3e-4},
		{3e-4, 512, 0, "sqrt", 3e-4},
		{1e-3, 64, 256, "linear", 2.5e-4},
	} {
		if got := ScaleLR(tc.lr, tc.batch, tc.base, tc.rule); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("ScaleLR(%g, %d, %d, %s) = %g, want %g", tc.lr, tc.batch, tc.base, tc.rule, got, tc.want)
		}
	}
	c := mustParse(t, minimal)
	if err := c.Override("optimizer.lr=3e-4", "data.batch_size=64", "trainer.accumulate_grad_batches=4", "trainer.base_batch_size=128", "trainer.lr_scaling=sqrt"); err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if b := c.EffectiveBatchSize(2); b != 512 {
		t.Errorf("EffectiveBatchSize(2) = %d, want 512", b)
	}
	if lr := c.PeakLR(2); math.Abs(lr-6e-4) > 1e-15 {
		t.Errorf("PeakLR(2) = %g, want 6e-4", lr)
	}
}

// TestByteSize checks the size spellings.
func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		ok   bool
	}{
		{"8GiB", 8 << 30, true}, {"512 MiB", 512 << 20, true}, {"1.5GB", 1_500_000_000, true},
		{"1024", 1024, true}, {"12B", 12, true}, {"-1GiB", 0, false}, {"GiB", 0, false}, {"8 gigs", 0, false},
	} {
		got, err := ParseByteSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestSessionOptions checks the mapping to ONNX Runtime options.
func TestSessionOptions(t *testing.T) {
	c := mustParse(t, minimal)
	if err := c.Override("trainer.precision=tf32", "runtime.gpu_mem_limit=2GiB", "runtime.cudnn_conv_algo_search=HEURISTIC"); err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	o, err := c.SessionOptions(true)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Device.CUDA || !o.CUDA.UseTF32 || o.CUDA.GPUMemLimit != 2<<30 || o.CUDA.ConvAlgoSearch != "HEURISTIC" {
		t.Errorf("SessionOptions = %+v", o)
	}
	if o, _ := c.SessionOptions(false); o.Device.CUDA {
		t.Error(`device "auto" without a GPU chose CUDA`)
	}
}
