package trainer

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestCopyParallel: a batch copied in pieces arrives whole, for sizes that
// do and do not split evenly and below the piece size.
func TestCopyParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{0, 1, 8<<20 - 1, 16 << 20, 3*(8<<20) + 7, 100<<20 + 3} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		dst := make([]byte, n)
		copyParallel(dst, src)
		if !bytes.Equal(dst, src) {
			t.Errorf("%d bytes: the copy differs", n)
		}
	}
}

func BenchmarkCopyParallel(b *testing.B) {
	src, dst := make([]byte, 154<<20), make([]byte, 154<<20)
	b.SetBytes(int64(len(src)))
	for range b.N {
		copyParallel(dst, src)
	}
}
