package setup

import (
	"errors"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/config"
)

// TestCheckDeviceSizes: a tiny LM (width 16) with GPT-2's vocabulary on 16
// tokens at batch 4096 has a loss piece of 4096 × 16 × 50,258 =
// 3,293,790,208 logits, over 2^31 − 1. Its training graph is built (the
// check reads inferred shapes; nothing that size is allocated) and the
// check a CUDA run makes refuses it as bad input, naming the tensors and
// the batch that fits (2048, accumulating 2); the CPU takes it; two loss
// pieces bring every tensor under the limit.
func TestCheckDeviceSizes(t *testing.T) {
	orttest.Init(t)
	conf := func(pieces string) *config.Config {
		c, err := config.Parse([]byte(`name = "lm"
[model]
recipe = "bd3lm"
loss = "loss"
[model.params]
hidden = 16
layers = 1
heads = 2
seq_len = 16
block_size = 4
`+pieces+`
[data]
kind = "synthetic"
batch_size = 4096
[trainer]
max_steps = 1
accumulate_grad_batches = 3
`), "lm.toml")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Resolve(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := conf("")
	dir, _, err := Artifacts(c, t.TempDir(), ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDeviceSizes(c, dir, ort.CPU); err != nil {
		t.Errorf("on the CPU: %v, want no refusal", err)
	}
	s, err := CheckSizes(c, dir)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, l := range s.Over {
		if l.Elements != 4096*16*50258 {
			t.Errorf("%s %v: %d elements, want 4096 × 16 × 50258", l.Name, l.Shape, l.Elements)
		}
		ops[l.Op] = true
	}
	for _, op := range []string{"Gemm", "LogSoftmax"} {
		if !ops[op] {
			t.Errorf("no %s output among the tensors over the limit: %s", op, s.Describe())
		}
	}
	err = CheckDeviceSizes(c, dir, ort.Device{CUDA: true})
	var bad interface{ BadInput() bool }
	if err == nil || !errors.As(err, &bad) || !bad.BadInput() {
		t.Fatalf("on CUDA: %v, want a bad-input refusal", err)
	}
	t.Log(err)
	for _, want := range []string{"data.batch_size", "LogSoftmax", "[65536 50258]", "data.batch_size = 2048 with trainer.accumulate_grad_batches = 6", "model.params.loss_pieces (now 1 piece)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	c = conf("loss_pieces = 2")
	dir, _, err = Artifacts(c, t.TempDir(), ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDeviceSizes(c, dir, ort.Device{CUDA: true}); err != nil {
		t.Errorf("with two loss pieces: %v, want no refusal", err)
	}
}
