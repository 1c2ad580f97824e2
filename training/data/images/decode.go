package images

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
	"golang.org/x/image/webp"
)

// maxPixels is PIL's decompression bomb limit (Image.MAX_IMAGE_PIXELS
// twice, past which Image.open raises): a header claiming more is refused
// before its pixels are allocated.
const maxPixels = 2 * 89478485

// isJPEG reports whether file starts with a JPEG's SOI marker.
func isJPEG(file []byte) bool { return len(file) > 2 && file[0] == 0xff && file[1] == 0xd8 }

// format is a decoder and its header reader.
type format struct {
	name   string
	decode func(io.Reader) (image.Image, error)
	config func(io.Reader) (image.Config, error)
}

// sniff picks file's format by its content, as PIL opens files whatever
// their names: a PNG named .jpg decodes as a PNG.
func sniff(file []byte) (format, bool) {
	has := func(magic string) bool { return bytes.HasPrefix(file, []byte(magic)) }
	switch {
	case isJPEG(file):
		return format{"JPEG", jpeg.Decode, jpeg.DecodeConfig}, true
	case has("\x89PNG\r\n\x1a\n"):
		return format{"PNG", png.Decode, png.DecodeConfig}, true
	case has("GIF87a"), has("GIF89a"):
		// Its first frame, as PIL's convert gives.
		return format{"GIF", gif.Decode, gif.DecodeConfig}, true
	case has("BM"):
		return format{"BMP", bmp.Decode, bmp.DecodeConfig}, true
	case has("II*\x00"), has("MM\x00*"):
		return format{"TIFF", tiff.Decode, tiff.DecodeConfig}, true
	case len(file) >= 12 && has("RIFF") && string(file[8:12]) == "WEBP":
		return format{"WebP", decodeWebP, webp.DecodeConfig}, true
	case isPNM(file):
		return format{"PNM", decodePNM, decodePNMConfig}, true
	}
	return format{}, false
}

// decodeImage decodes a whole image file of any format sniff knows, JPEG
// with Go's decoder.
func decodeImage(file []byte) (image.Image, error) {
	if len(file) == 0 {
		return nil, errors.New("empty file")
	}
	f, ok := sniff(file)
	if !ok {
		return nil, errors.New("not a JPEG, PNG, BMP, TIFF, WebP, GIF, PPM or PGM file")
	}
	c, err := f.config(bytes.NewReader(file))
	if err != nil {
		return nil, err
	}
	if c.Width < 1 || c.Height < 1 || c.Width > maxPixels/c.Height {
		return nil, fmt.Errorf("%s of %d × %d pixels: want 1 to %d pixels", f.name, c.Width, c.Height, maxPixels)
	}
	img, err := f.decode(bytes.NewReader(file))
	if err != nil {
		return nil, err
	}
	if img.Bounds().Empty() {
		return nil, fmt.Errorf("%s without pixels", f.name)
	}
	return img, nil
}

// toRGB copies rect of img into buf as packed RGB, as PIL's convert("RGB")
// does: alpha is dropped and the stored colour kept, where Go's
// color.RGBA() would premultiply it (a transparent pixel would turn
// black). A premultiplied image (image.RGBA with alpha, as TIFF's
// associated alpha decodes) is divided back; a GIF's transparent index,
// which Go decodes as transparent black, stays black. There are fast paths
// for the images the decoders give most: YCbCr (JPEG, lossy WebP), RGBA,
// NRGBA and Gray (PNG), Paletted (PNG, GIF).
func toRGB(img image.Image, rect image.Rectangle, buf []byte) []byte {
	n := 3 * rect.Dx() * rect.Dy()
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	i := 0
	// each runs pix on every pixel of rect, in order.
	each := func(pix func(x, y int) (r, g, b uint8)) {
		for y := rect.Min.Y; y < rect.Max.Y; y++ {
			for x := rect.Min.X; x < rect.Max.X; x++ {
				buf[i], buf[i+1], buf[i+2] = pix(x, y)
				i += 3
			}
		}
	}
	switch m := img.(type) {
	case *image.NYCbCrA:
		img = &m.YCbCr // WebP's alpha, dropped
	}
	switch m := img.(type) {
	case *image.YCbCr:
		// Go's JPEG decoder: inline, as BenchmarkDecode measures it.
		for y := rect.Min.Y; y < rect.Max.Y; y++ {
			for x := rect.Min.X; x < rect.Max.X; x++ {
				yi, ci := m.YOffset(x, y), m.COffset(x, y)
				buf[i], buf[i+1], buf[i+2] = ycbcrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				i += 3
			}
		}
	case *image.NRGBA:
		each(func(x, y int) (uint8, uint8, uint8) {
			p := m.Pix[m.PixOffset(x, y):]
			return p[0], p[1], p[2]
		})
	case *image.RGBA:
		each(func(x, y int) (uint8, uint8, uint8) {
			p := m.Pix[m.PixOffset(x, y):]
			return unpremultiply(p[0], p[3]), unpremultiply(p[1], p[3]), unpremultiply(p[2], p[3])
		})
	case *image.Gray:
		each(func(x, y int) (uint8, uint8, uint8) {
			v := m.Pix[m.PixOffset(x, y)]
			return v, v, v
		})
	case *image.Paletted:
		lut := make([][3]uint8, 256)
		for k, c := range m.Palette[:min(len(m.Palette), 256)] {
			if c != nil {
				lut[k][0], lut[k][1], lut[k][2] = straight(c)
			}
		}
		each(func(x, y int) (uint8, uint8, uint8) {
			c := lut[m.Pix[m.PixOffset(x, y)]]
			return c[0], c[1], c[2]
		})
	default:
		each(func(x, y int) (uint8, uint8, uint8) { return straight(img.At(x, y)) })
	}
	return buf
}

// straight is c's colour without its alpha, in 8 bits per channel: the
// stored channels of a non-premultiplied colour, a premultiplied one
// divided by its alpha (transparent black where the alpha is 0).
func straight(c color.Color) (r, g, b uint8) {
	switch c := c.(type) {
	case color.NRGBA:
		return c.R, c.G, c.B
	case color.NRGBA64:
		return uint8(c.R >> 8), uint8(c.G >> 8), uint8(c.B >> 8)
	case color.NYCbCrA:
		return ycbcrToRGB(c.Y, c.Cb, c.Cr)
	}
	r32, g32, b32, a := c.RGBA()
	if a != 0 && a != 0xffff {
		r32, g32, b32 = r32*0xffff/a, g32*0xffff/a, b32*0xffff/a
	}
	return uint8(r32 >> 8), uint8(g32 >> 8), uint8(b32 >> 8)
}

// unpremultiply divides an 8-bit premultiplied channel v by its alpha a.
func unpremultiply(v, a uint8) uint8 {
	if a == 0xff || a == 0 {
		return v
	}
	return uint8(min(int(v)*255/int(a), 255))
}

// ycbcrToRGB is JFIF's conversion in 16.16 fixed point.
func ycbcrToRGB(y, cb, cr uint8) (uint8, uint8, uint8) {
	yy := int32(y) << 16
	b1, r1 := int32(cb)-128, int32(cr)-128
	clamp := func(v int32) uint8 { return uint8(min(max((v+1<<15)>>16, 0), 255)) }
	return clamp(yy + 91881*r1), clamp(yy - 22554*b1 - 46802*r1), clamp(yy + 116130*b1)
}

// decodeWebP decodes a WebP as libwebp decodes it for PIL. Lossless WebP
// is RGB already. Lossy WebP is BT.601 YUV of limited range (Y 16–235),
// which color.YCbCr would read as JFIF's full range, some 8 levels off on
// average: it is converted here as libwebp converts it, with its "fancy"
// chroma upsampling.
func decodeWebP(r io.Reader) (image.Image, error) {
	img, err := webp.Decode(r)
	if err != nil {
		return nil, err
	}
	var alpha *image.NYCbCrA
	yc, ok := img.(*image.YCbCr)
	if a, isA := img.(*image.NYCbCrA); isA {
		alpha, yc, ok = a, &a.YCbCr, true
	}
	if !ok || yc.SubsampleRatio != image.YCbCrSubsampleRatio420 || yc.Rect.Min != (image.Point{}) {
		return img, nil
	}
	out := webpToRGB(yc)
	if alpha != nil {
		for y := range out.Rect.Dy() {
			for x := range out.Rect.Dx() {
				out.Pix[out.PixOffset(x, y)+3] = alpha.A[alpha.AOffset(x, y)]
			}
		}
	}
	return out, nil
}

// webpToRGB converts 4:2:0 VP8 YUV at the origin to opaque RGB as libwebp's
// EmitFancyRGB does: each pixel's chroma is 9/16 of the nearest sample,
// 3/16 of each of its horizontal and vertical neighbours towards the pixel
// and 1/16 of the diagonal one (in libwebp's two roundings), the nearest
// repeated past the top and bottom edges and only the vertical pair
// blended (3:1) in the first column and in the last of an even width.
func webpToRGB(m *image.YCbCr) *image.NRGBA {
	W, H := m.Rect.Dx(), m.Rect.Dy()
	cw, ch := (W+1)/2, (H+1)/2
	out := image.NewNRGBA(m.Rect)
	for py := range H {
		nr := py >> 1 // the nearest chroma row and the other one blended
		fr := nr - 1
		if py&1 == 1 {
			fr = nr + 1
		}
		fr = min(max(fr, 0), ch-1)
		for px := range W {
			nc := px >> 1
			fc := nc - 1
			if px&1 == 1 {
				fc = nc + 1
			}
			edge := fc < 0 || fc >= cw
			up := func(p []uint8) int {
				n, v := int(p[nr*m.CStride+nc]), int(p[fr*m.CStride+nc])
				if edge {
					return (3*n + v + 2) >> 2
				}
				h, d := int(p[nr*m.CStride+fc]), int(p[fr*m.CStride+fc])
				return ((d+3*h+3*v+n+8)>>3 + n) >> 1
			}
			o := out.Pix[out.PixOffset(px, py):]
			o[0], o[1], o[2] = webpYUVToRGB(int(m.Y[py*m.YStride+px]), up(m.Cb), up(m.Cr))
			o[3] = 0xff
		}
	}
	return out
}

// webpYUVToRGB is libwebp's VP8YUVToR, G and B: 14-bit fixed point.
func webpYUVToRGB(y, u, v int) (r, g, b uint8) {
	mulHi := func(v, c int) int { return v * c >> 8 }
	clip := func(v int) uint8 {
		if v&^(256<<6-1) == 0 {
			return uint8(v >> 6)
		}
		if v < 0 {
			return 0
		}
		return 255
	}
	yy := mulHi(y, 19077)
	return clip(yy + mulHi(v, 26149) - 14234), clip(yy - mulHi(u, 6419) - mulHi(v, 13320) + 8708), clip(yy + mulHi(u, 33050) - 17685)
}
