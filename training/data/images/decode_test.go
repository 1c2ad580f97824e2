package images

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rgbOf decodes file as Load's non-JPEG path does, whole.
func rgbOf(t *testing.T, file []byte) (image.Rectangle, []byte) {
	t.Helper()
	img, err := decodeImage(file)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	return b, toRGB(img, b, nil)
}

// TestAlphaIsDroppedNotPremultiplied: an RGBA PNG whose alpha runs from 0
// to 255 decodes to its stored colours, as PIL's convert("RGB") gives
// them; premultiplying would turn the transparent column black.
func TestAlphaIsDroppedNotPremultiplied(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 4, 2))
	for y := range 2 {
		for x := range 4 {
			img.SetNRGBA(x, y, color.NRGBA{200, 100, uint8(50 + x), uint8(x * 85)})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	_, got := rgbOf(t, buf.Bytes())
	for i := 0; i < len(got); i += 3 {
		x := i / 3 % 4
		if want := []byte{200, 100, byte(50 + x)}; !bytes.Equal(got[i:i+3], want) {
			t.Fatalf("pixel %d (alpha %d): %v, want %v", i/3, x*85, got[i:i+3], want)
		}
	}
	// A premultiplied image (TIFF's associated alpha) is divided back.
	pre := image.NewRGBA(image.Rect(0, 0, 1, 1))
	pre.SetRGBA(0, 0, color.RGBA{100, 50, 0, 128})
	if got := toRGB(pre, pre.Bounds(), nil); !bytes.Equal(got, []byte{199, 99, 0}) {
		t.Errorf("premultiplied: %v", got)
	}
}

// TestDecodeMatchesPIL decodes the files PIL writes (PNG with alpha, grey
// and alpha, a palette with a transparent entry; BMP, TIFF, WebP, GIF,
// PPM/PGM/PBM, plain and binary, maxval 100 and 65535) and compares the
// RGB bytes with PIL's Image.open(f).convert("RGB"), torchvision's loader:
// exactly, lossy WebP too (VP8 decoding is exact, and its YUV is converted
// as libwebp converts it).
func TestDecodeMatchesPIL(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import PIL, numpy").CombinedOutput(); err != nil {
		t.Skipf("PIL is not installed for %s (apt-get install python3-pil python3-numpy): %v\n%s", python, err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command(python, filepath.Join("testdata", "pil_decode_ref.py"), dir).CombinedOutput(); err != nil {
		t.Fatalf("pil_decode_ref.py: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string][2]int
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range cases {
			if !yield(n) {
				return
			}
		}
	})
	if len(names) < 15 {
		t.Fatalf("only %d cases: %v", len(names), names)
	}
	for _, name := range names {
		c := cases[name]
		file, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(dir, name+".rgb"))
		if err != nil {
			t.Fatal(err)
		}
		img, err := decodeImage(file)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		b := img.Bounds()
		if b.Dx() != c[0] || b.Dy() != c[1] {
			t.Errorf("%s: %v, want %v × %v", name, b, c[0], c[1])
			continue
		}
		got := toRGB(img, b, nil)
		var sum, worst int
		for i := range want {
			d := absDiff(got[i], want[i])
			sum += d
			worst = max(worst, d)
		}
		if worst > 0 {
			t.Errorf("%s: differs from PIL by up to %d levels (%.3f on average)", name, worst, float64(sum)/float64(len(want)))
		}
	}
}

// TestPNM: Netpbm headers with comments, samples scaled from maxval, plain
// bitmaps without spaces, and files shorter than their header are errors.
func TestPNM(t *testing.T) {
	for _, c := range []struct {
		file string
		want []byte // RGB, or nil for an error
	}{
		{"P5 2 1 100 \x00\x64", []byte{0, 0, 0, 255, 255, 255}},
		{"P5\n#c\n2 1\n10\n\x05\x0b", []byte{128, 128, 128, 255, 255, 255}}, // 127.5 rounds to even, 11 clips
		{"P6 1 1 65535\n\x80\x00\x00\x00\xff\xff", []byte{128, 0, 255}},
		{"P2 2 1 255 7#c\n8", []byte{7, 7, 7, 8, 8, 8}},
		{"P1 3 1 1#c\n01", []byte{0, 0, 0, 255, 255, 255, 0, 0, 0}},
		{"P4 3 1 \xa0", []byte{0, 0, 0, 255, 255, 255, 0, 0, 0}},
		{"P6 2 2 255\n\x00\x00\x00", nil},   // truncated
		{"P2 2 1 9 3 10", nil},              // above maxval
		{"P5 0 1 255\n", nil},               // no pixels
		{"P5 99999 99999 255\n\x00", nil},   // a decompression bomb
		{"P3 1 1 255 1 x 3", nil},           // not a number
		{"P5 1 1 70000\n\x00\x00", nil},     // maxval out of range
		{"P1 2 1\n2 1", nil},                // not a bit
		{"P4 9 1\n\xff", nil},               // rows of whole bytes: 2 needed
		{"P7 1 1 255\n\x00", nil},           // PAM is not read
		{"P5 12345678901 1 255\n\x00", nil}, // too many digits
		{"P6 1 1 255\n", nil},               // no raster
		{"P3 1 1 255\n1 2", nil},            // one sample short
	} {
		img, err := decodeImage([]byte(c.file))
		if c.want == nil {
			if err == nil {
				t.Errorf("%q: decoded", c.file)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.file, err)
			continue
		}
		if got := toRGB(img, img.Bounds(), nil); !bytes.Equal(got, c.want) {
			t.Errorf("%q: %v, want %v", c.file, got, c.want)
		}
	}
	if _, err := decodeImage([]byte("P7 1 1 255\n\x00")); err == nil || !strings.Contains(err.Error(), "not a JPEG, PNG") {
		t.Errorf("unknown format: %v", err)
	}
}
