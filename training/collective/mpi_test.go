package collective

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// mpirun runs n copies of this test binary's test named run under
// mpirun with env, skipping where mpirun is not installed.
func mpirun(t *testing.T, n int, run string, env ...string) (string, error) {
	t.Helper()
	out, err := Mpirun(n, env, os.Args[0], "-test.run", "^"+run+"$", "-test.v")
	if errors.Is(err, ErrNoMpirun) {
		t.Skip(err)
	}
	return out, err
}

// TestSumAcrossTwoRanks: two ranks under mpirun sum float32 and float64
// buffers in place, agree on their ranks and the world size, and receive
// one rank's broadcast.
func TestSumAcrossTwoRanks(t *testing.T) {
	if os.Getenv("ORTRAIN_TEST_RANK_CHILD") == "1" {
		c, err := Init()
		if err != nil {
			t.Fatal(err)
		}
		f := []float32{float32(c.Rank() + 1), float32(10 * (c.Rank() + 1))}
		d := []float64{0.5 * float64(c.Rank())}
		if err := c.SumFloat32(f); err != nil {
			t.Fatal(err)
		}
		if err := c.SumFloat64(d); err != nil {
			t.Fatal(err)
		}
		b := []byte{0, 0, 0}
		if c.Rank() == 1 {
			b = []byte{7, 8, 9}
		}
		if err := c.Broadcast(b, 1); err != nil || string(b) != "\x07\x08\x09" {
			t.Fatalf("rank %d: broadcast from rank 1 gave %v (%v), want [7 8 9]", c.Rank(), b, err)
		}
		if size, ok := Launched(); !ok || size != c.Size() || f[0] != 3 || f[1] != 30 || d[0] != 0.5 {
			t.Fatalf("rank %d of %d (launcher says %d, %v): sums %v %v, want [3 30] [0.5]", c.Rank(), c.Size(), size, ok, f, d)
		}
		fmt.Printf("rank %d of %d summed\n", c.Rank(), c.Size())
		c.Finalize()
		return
	}
	out, err := mpirun(t, 2, "TestSumAcrossTwoRanks", "ORTRAIN_TEST_RANK_CHILD=1")
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	for _, want := range []string{"rank 0 of 2 summed", "rank 1 of 2 summed"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
