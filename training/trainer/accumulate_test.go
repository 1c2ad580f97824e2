package trainer

import (
	"math"
	"strconv"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
)

// TestAccumulationEqualsOneBatch: a step of micro-batches of 2, 3 or 4
// samples, their gradients summed by the trainer (the training graph
// writes each micro-batch's alone), takes the step one batch of all their
// samples takes: the same loss, gradient norm and so the same next steps.
// On $ORTRAIN_TEST_DEVICE (the CPU by default): on a GPU it trains the
// flat tensors' views and the accumulator there.
func TestAccumulationEqualsOneBatch(t *testing.T) {
	art := mlpArtifacts(t)
	device := `trainer.device="` + orttest.Device(t).String() + `"`
	steps := func(batch, accum int) []float64 {
		c := testConfig(t, art, device, "data.shuffle=false", "trainer.max_steps=10", "trainer.val_check_interval=1000",
			"trainer.checkpoint_every_n_steps=0", "scheduler.warmup_steps=0",
			"data.batch_size="+strconv.Itoa(batch), "trainer.accumulate_grad_batches="+strconv.Itoa(accum))
		rec := &recorder{}
		if _, err := run(t, c, "", "", rec); err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, r := range rec.results {
			out = append(out, r.Loss, r.GradNorm)
		}
		return out
	}
	whole := steps(12, 1)
	for _, split := range [][2]int{{6, 2}, {4, 3}, {3, 4}} {
		got := steps(split[0], split[1])
		if len(got) != len(whole) {
			t.Fatalf("%d × %d: %d values, one batch %d", split[0], split[1], len(got), len(whole))
		}
		for i := range got {
			if d := math.Abs(got[i] - whole[i]); !(d <= 2e-5*(1+math.Abs(whole[i]))) {
				t.Errorf("%d × %d: step %d %s %.7g, one batch of 12 %.7g", split[0], split[1], i/2+1, []string{"loss", "grad norm"}[i%2], got[i], whole[i])
			}
		}
	}
}

// TestClearInPieces: clearing a tensor longer than the host zeros it is
// cleared from (a GPU's flat tensors) leaves every element zero, on
// $ORTRAIN_TEST_DEVICE.
func TestClearInPieces(t *testing.T) {
	art := mlpArtifacts(t)
	m, err := artifacts.Load(art)
	if err != nil {
		t.Fatal(err)
	}
	e, err := openEngine(art, m, ort.Options{Device: orttest.Device(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	n := 2*zeroChunk + 3
	v, err := e.train.Alloc(ort.Float32, []int64{int64(n)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	if err := e.fill(v, asBytes(ones)); err != nil {
		t.Fatal(err)
	}
	if err := e.clear(v); err != nil {
		t.Fatal(err)
	}
	host, err := e.train.Download(v)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	for i, f := range ort.Data[float32](host) {
		if f != 0 {
			t.Fatalf("element %d of %d is %g after clearing", i, n, f)
		}
	}
}
