package tokens

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/loadbench"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

func problems(n int) []Example {
	rng := rand.New(rand.NewPCG(1, 2))
	ex := make([]Example, n)
	for i := range ex {
		p := synthetic.Arithmetic(rng)
		ex[i] = Example{Question: p.Question, Answer: p.Answer}
	}
	return ex
}

// BenchmarkTokenize is GPT-2 BPE on one core: GSM8K-style examples laid
// out per second, the cost New pays once per dataset.
func BenchmarkTokenize(b *testing.B) {
	tok := mustGPT2(b)
	ex := problems(64)
	d := &Dataset{cfg: Config{SeqLen: 512, BlockSize: 16}}
	n := 0
	for b.Loop() {
		d.layout(tok, ex[n%len(ex)])
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "samples/s")
}

// BenchmarkLoader delivers noised 512-token sequences in both layouts:
// samples/s in total and per worker.
func BenchmarkLoader(b *testing.B) {
	tok := mustGPT2(b)
	ex := problems(2048)
	for _, layout := range []struct {
		name string
		cfg  Config
	}{
		{"bd3lm", Config{SeqLen: 512, BlockSize: 16, Noise: true}},
		{"hdp", Config{SeqLen: 512, Segments: []int{128, 128, 256}, Noise: true}},
	} {
		ds, err := New(ex, tok, layout.cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/workers=%d", layout.name, workers), func(b *testing.B) {
				loadbench.Run(b, ds, data.Config{BatchSize: 64, Workers: workers, Prefetch: 2, MaxBytes: 1 << 30, Shuffle: true})
			})
		}
	}
}
