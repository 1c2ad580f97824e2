package images

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"math"
	"strconv"
)

// Netpbm images (PBM, PGM, PPM: P1–P6), as PIL's PpmImagePlugin reads
// them, which torchvision's ImageFolder loads as .ppm and .pgm. Samples are
// scaled to 8 bits as PIL scales them, round(v/maxval·255); PIL keeps a
// PGM with maxval > 255 as 32-bit integers, which its convert("RGB") clips
// at 255, where here it is scaled as a PPM's is.

// pnm is a Netpbm header.
type pnm struct {
	kind   byte // '1'–'6'
	w, h   int
	maxval int // 1 for bitmaps
	data   int // offset of the raster
}

// isPNM reports whether file starts with a Netpbm magic number, which is
// followed by whitespace.
func isPNM(file []byte) bool {
	return len(file) > 2 && file[0] == 'P' && file[1] >= '1' && file[1] <= '6' && isPNMSpace(file[2])
}

// isPNMSpace is Netpbm's (and PIL's) whitespace.
func isPNMSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// errPNMShort is a raster shorter than its header says.
var errPNMShort = errors.New("PNM: truncated: the image data ends early")

// pnmScanner reads the decimal tokens of a header or a plain raster,
// skipping whitespace and # comments (to the end of the line).
type pnmScanner struct {
	b   []byte
	pos int
}

// skip moves past whitespace and comments.
func (s *pnmScanner) skip() {
	for s.pos < len(s.b) {
		switch c := s.b[s.pos]; {
		case isPNMSpace(c):
			s.pos++
		case c == '#':
			for s.pos < len(s.b) && s.b[s.pos] != '\n' && s.b[s.pos] != '\r' {
				s.pos++
			}
		default:
			return
		}
	}
}

// token is the next decimal number (up to 10 digits, as PIL allows) and
// the one whitespace byte that ends it (or a comment's #, left to skip).
func (s *pnmScanner) token() (int, error) {
	s.skip()
	start := s.pos
	for s.pos < len(s.b) && s.b[s.pos] >= '0' && s.b[s.pos] <= '9' {
		s.pos++
	}
	digits := s.b[start:s.pos]
	if s.pos < len(s.b) && s.b[s.pos] != '#' {
		if !isPNMSpace(s.b[s.pos]) {
			return 0, fmt.Errorf("PNM: %q is not a number", s.b[start:s.pos+1])
		}
		s.pos++
	}
	if len(digits) == 0 {
		return 0, errPNMShort
	}
	if len(digits) > 10 {
		return 0, fmt.Errorf("PNM: number %.11s… too long", digits)
	}
	return strconv.Atoi(string(digits))
}

// parsePNM reads the header of file, which isPNM accepts.
func parsePNM(file []byte) (pnm, error) {
	s := pnmScanner{b: file, pos: 2}
	p := pnm{kind: file[1], maxval: 1}
	var err error
	if p.w, err = s.token(); err != nil {
		return p, err
	}
	if p.h, err = s.token(); err != nil {
		return p, err
	}
	if p.kind != '1' && p.kind != '4' {
		if p.maxval, err = s.token(); err != nil {
			return p, err
		}
		if p.maxval < 1 || p.maxval > 65535 {
			return p, fmt.Errorf("PNM: maxval %d: want 1 to 65535", p.maxval)
		}
	}
	if p.w < 1 || p.h < 1 || p.w > maxPixels/p.h {
		return p, fmt.Errorf("PNM of %d × %d pixels: want 1 to %d pixels", p.w, p.h, maxPixels)
	}
	p.data = s.pos
	return p, nil
}

func decodePNMConfig(r io.Reader) (image.Config, error) {
	file, err := io.ReadAll(r)
	if err != nil {
		return image.Config{}, err
	}
	if !isPNM(file) {
		return image.Config{}, errors.New("PNM: not a Netpbm file")
	}
	p, err := parsePNM(file)
	model := color.GrayModel
	if p.kind == '3' || p.kind == '6' {
		model = color.NRGBAModel
	}
	return image.Config{ColorModel: model, Width: p.w, Height: p.h}, err
}

// decodePNM decodes a Netpbm image as an *image.Gray (P1, P2, P4, P5) or
// an opaque *image.NRGBA (P3, P6).
func decodePNM(r io.Reader) (image.Image, error) {
	file, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if !isPNM(file) {
		return nil, errors.New("PNM: not a Netpbm file")
	}
	p, err := parsePNM(file)
	if err != nil {
		return nil, err
	}
	ch := 1
	if p.kind == '3' || p.kind == '6' {
		ch = 3
	}
	n := p.w * p.h * ch // samples
	raster := file[p.data:]
	// Every sample takes at least one byte (P4: a bit) of the file: a
	// short file is refused before its pixels are allocated.
	if p.kind != '4' && len(raster) < n {
		return nil, errPNMShort
	}
	samples := make([]uint8, n)
	scale := func(v int) uint8 {
		if p.maxval == 255 {
			return uint8(min(v, 255))
		}
		return uint8(min(math.RoundToEven(float64(v)/float64(p.maxval)*255), 255))
	}
	switch p.kind {
	case '1':
		// Digits need no whitespace between them; 1 is black.
		s := pnmScanner{b: raster}
		for i := range samples {
			s.skip()
			if s.pos == len(raster) {
				return nil, errPNMShort
			}
			switch raster[s.pos] {
			case '0':
				samples[i] = 255
			case '1':
				samples[i] = 0
			default:
				return nil, fmt.Errorf("PNM: %q in a plain bitmap", raster[s.pos])
			}
			s.pos++
		}
	case '2', '3':
		s := pnmScanner{b: raster}
		for i := range samples {
			v, err := s.token()
			if err != nil {
				return nil, err
			}
			if v > p.maxval {
				return nil, fmt.Errorf("PNM: value %d above maxval %d", v, p.maxval)
			}
			samples[i] = scale(v)
		}
	case '4':
		// Rows of whole bytes, the most significant bit first; 1 is
		// black.
		row := (p.w + 7) / 8
		if len(raster) < row*p.h {
			return nil, errPNMShort
		}
		for y := range p.h {
			for x := range p.w {
				if raster[y*row+x/8]&(0x80>>(x%8)) == 0 {
					samples[y*p.w+x] = 255
				}
			}
		}
	case '5', '6':
		if p.maxval < 256 {
			for i, v := range raster[:n] {
				samples[i] = scale(int(v))
			}
			break
		}
		if len(raster) < 2*n {
			return nil, errPNMShort
		}
		for i := range samples {
			samples[i] = scale(int(raster[2*i])<<8 | int(raster[2*i+1]))
		}
	}
	rect := image.Rect(0, 0, p.w, p.h)
	if ch == 1 {
		return &image.Gray{Pix: samples, Stride: p.w, Rect: rect}, nil
	}
	img := image.NewNRGBA(rect)
	for i := range p.w * p.h {
		copy(img.Pix[4*i:4*i+3], samples[3*i:3*i+3])
		img.Pix[4*i+3] = 255
	}
	return img, nil
}
