package trainer

import (
	"context"
	"testing"
	"time"
)

// BenchmarkStepHostOverhead measures one optimizer step of the test MLP
// (two micro-batches of 8 and the update) through the loop, and the same
// three graph runs on the same bound values alone. It reports the loop's
// host overhead per step, host-ns/step: everything beyond ONNX Runtime's own
// runs (loader hand-off, batch copy, scalars, parity flips, finiteness
// checks, the schedule), and allocations per step. The two are timed
// alternately in one loop so that drift in the machine's speed hits both,
// with one intra-op thread so ONNX Runtime's spinning pool does not compete
// with the loader's workers on a small machine.
func BenchmarkStepHostOverhead(b *testing.B) {
	c := testConfig(b, mlpArtifacts(b), "trainer.max_steps=1000000000", "data.drop_last=true", "trainer.accumulate_grad_batches=2", "runtime.intra_op_threads=1")
	tr, _ := build(b, c, "", "", nil)
	if _, err := tr.step(context.Background()); err != nil {
		b.Fatal(err)
	}
	e := tr.eng
	// ORT alone: the same bindings, parities flipped as the loop does.
	ortStep := func() {
		for k := range 2 {
			e.reset[0] = k == 0
			if err := e.trainB[e.p][e.g][e.u].Run(); err != nil {
				b.Fatal(err)
			}
			e.g ^= 1
			e.u ^= 1
		}
		if err := e.optB[e.p][e.g].Run(); err != nil {
			b.Fatal(err)
		}
		e.p ^= 1
	}
	var ortOnly, full time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		ortStep()
		t1 := time.Now()
		if _, err := tr.step(context.Background()); err != nil {
			b.Fatal(err)
		}
		ortOnly += t1.Sub(t0)
		full += time.Since(t1)
	}
	b.StopTimer()
	b.ReportMetric(float64(full.Nanoseconds())/float64(b.N), "step-ns")
	b.ReportMetric(float64(ortOnly.Nanoseconds())/float64(b.N), "ort-ns/step")
	b.ReportMetric(float64((full-ortOnly).Nanoseconds())/float64(b.N), "host-ns/step")
}
