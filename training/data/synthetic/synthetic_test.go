package synthetic

import (
	"bytes"
	"image/jpeg"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
)

func TestPhantomHasAirSkullAndBrain(t *testing.T) {
	const n = 64
	v := Phantom(n, n, n, 0, rand.New(rand.NewPCG(1, 1)))
	at := func(x, y, z int) float32 { return v[(z*n+y)*n+x] }
	for _, tc := range []struct {
		name    string
		x, y, z int
		lo, hi  float32
	}{
		{"air in the corner", 0, 0, 0, -1000, -1000},
		{"brain at the center", n / 2, n / 2, n / 2, -601, -599},
	} {
		if got := at(tc.x, tc.y, tc.z); got < tc.lo || got > tc.hi {
			t.Errorf("%s: %v HU, want %v to %v", tc.name, got, tc.lo, tc.hi)
		}
	}
	skull := false
	for y := n / 2; y < n; y++ {
		skull = skull || (at(n/2, y, n/2) > 999 && at(n/2, y, n/2) < 1001)
	}
	if !skull {
		t.Error("no skull (+1000 HU) between the center and the edge")
	}
}

// TestArithmeticIsRight checks every calculator annotation and that the
// "####" line is the last result.
func TestArithmeticIsRight(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	step := regexp.MustCompile(`<<(\d+)([*+-])(\d+)=(\d+)>>`)
	final := regexp.MustCompile(`#### (\d+)$`)
	for range 200 {
		p := Arithmetic(rng)
		var last int
		for _, m := range step.FindAllStringSubmatch(p.Answer, -1) {
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[3])
			got, _ := strconv.Atoi(m[4])
			want := map[string]int{"*": a * b, "+": a + b, "-": a - b}[m[2]]
			if got != want {
				t.Fatalf("%s is wrong in %q", m[0], p.Answer)
			}
			last = got
		}
		f := final.FindStringSubmatch(p.Answer)
		if f == nil || f[1] != strconv.Itoa(last) {
			t.Fatalf("final line of %q is not %d", p.Answer, last)
		}
	}
}

func TestPhotoIsImageNetSized(t *testing.T) {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, Photo(500, 375, 1, rand.New(rand.NewPCG(1, 2))), &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	if kb := b.Len() / 1000; kb < 90 || kb > 130 {
		t.Errorf("500×375 at quality 90 is %d KB, want about 110", kb)
	}
}
