package trainer

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestCopyParallel: a batch copied in pieces arrives whole, for sizes that
// do and do not split evenly and below the piece size, and a copy in
// pieces allocates nothing (it runs every step).
func TestCopyParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{0, 1, 8<<20 - 1, 16 << 20, 3*(8<<20) + 7, 100<<20 + 3} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		dst := make([]byte, n)
		copyParallel(new(sync.WaitGroup), dst, src)
		if !bytes.Equal(dst, src) {
			t.Errorf("%d bytes: the copy differs", n)
		}
	}
	src, dst := make([]byte, 32<<20), make([]byte, 32<<20)
	var wg sync.WaitGroup
	if a := testing.AllocsPerRun(5, func() { copyParallel(&wg, dst, src) }); a != 0 {
		t.Errorf("a copy in pieces allocates %.1f times, want 0", a)
	}
}

func BenchmarkCopyParallel(b *testing.B) {
	src, dst := make([]byte, 154<<20), make([]byte, 154<<20)
	var wg sync.WaitGroup
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		copyParallel(&wg, dst, src)
	}
}
