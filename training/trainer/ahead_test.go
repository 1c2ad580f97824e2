package trainer

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
)

// TestStepReadsItsBatch: every step trains on its own batches although the
// next one is loaded, into the other slot, while it runs (aheadLoader).
// With a learning rate of 1e-30 the weights never change (each update
// rounds back to them; the trainer's check that the first update changed
// them is skipped), so each step's loss
// is the mean of the eval graph's losses on that step's micro-batches, as
// a fresh loader delivers them, one after another: a step that read its
// successor's batch, or a slot filled while a run read it, would give
// another sample's loss. Batches of 7 from 96 samples end each epoch with
// a short one, whose new shape gets its slot new tensors.
func TestStepReadsItsBatch(t *testing.T) {
	orttest.Init(t)
	art := filepath.Join(t.TempDir(), "art")
	if _, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(1, 2))), Out: art, Loss: "cross_entropy"}); err != nil {
		t.Fatal(err)
	}
	for _, accum := range []int{1, 2} {
		c := testConfig(t, art, "data.batch_size=7", "trainer.max_steps=40", "optimizer.lr=1e-30", "scheduler.name=\"constant\"",
			"scheduler.warmup_steps=0", "scheduler.min_lr=0", "trainer.val_check_interval=1000", "trainer.gradient_clip_val=0",
			"trainer.accumulate_grad_batches="+string(rune('0'+accum)))
		rec := &recorder{}
		tr, rd := build(t, c, "", "", nil)
		tr.callbacks = append(tr.callbacks, rec)
		tr.changeSeen = true
		if err := tr.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The same batches from a loader of its own, through the eval graph
		// with the (unchanged) weights.
		train, _, err := loaders(c, newBlobs(96, 1), newBlobs(40, 2), nil, false)
		if err != nil {
			t.Fatal(err)
		}
		short := 0
		for i, res := range rec.results {
			want := 0.0
			for range accum {
				b, err := train.Next()
				if err != nil {
					t.Fatal(err)
				}
				if b.Tensors[0].Shape[0] != 7 {
					short++
				}
				if _, err := tr.eng.evalData.load(b, tr.eng.allEval); err != nil {
					t.Fatal(err)
				}
				l, err := tr.eng.evaluate()
				if err != nil {
					t.Fatal(err)
				}
				want += l / float64(accum)
			}
			if math.Abs(res.Loss-want) > 1e-6*math.Abs(want) {
				t.Errorf("accumulating %d: step %d: loss %.7f, its batches' %.7f", accum, i+1, res.Loss, want)
			}
		}
		train.Close()
		tr.Close()
		rd.Close()
		if len(rec.results) != 40 || short == 0 {
			t.Fatalf("accumulating %d: %d steps, %d short batches: the test needs 40 and a short one", accum, len(rec.results), short)
		}
	}
}
