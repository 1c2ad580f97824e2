package images

/*
// libjpeg-turbo is linked statically (Debian libjpeg62-turbo-dev ships
// libjpeg.a) so bin/ortrain runs on machines without libjpeg.so.62, such as
// GPU images that ship only CUDA.
#cgo LDFLAGS: -l:libjpeg.a
#include <stdio.h>
#include <string.h>
#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>

// errmgr turns libjpeg's fatal errors, which by default exit the process,
// into a longjmp back to the caller with the message kept.
struct errmgr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
	int eof; // the data ended early: libjpeg only warns, we fail
};

static void on_error(j_common_ptr c) {
	struct errmgr *e = (struct errmgr *)c->err;
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

static void on_message(j_common_ptr c, int level) {
	struct errmgr *e = (struct errmgr *)c->err;
	if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
		e->eof = 1;
	}
}

static void setup(struct jpeg_decompress_struct *d, struct errmgr *e) {
	d->err = jpeg_std_error(&e->pub);
	e->pub.error_exit = on_error;
	e->pub.emit_message = on_message;
	e->msg[0] = 0;
	e->eof = 0;
}

// jt_info reads the image size. It returns 0, or -1 with msg set.
static int jt_info(const unsigned char *buf, unsigned long len, int *w, int *h, char *msg) {
	struct jpeg_decompress_struct d;
	struct errmgr e;
	setup(&d, &e);
	if (setjmp(e.jb)) {
		strcpy(msg, e.msg);
		jpeg_destroy_decompress(&d);
		return -1;
	}
	jpeg_create_decompress(&d);
	jpeg_mem_src(&d, buf, len);
	jpeg_read_header(&d, TRUE);
	*w = d.image_width;
	*h = d.image_height;
	jpeg_destroy_decompress(&d);
	return 0;
}

// jt_decode decodes, scaled by num/8 in the DCT, the rows [y0, y0+ch) and at
// least the columns [x0, x0+cw) of the scaled image as RGB into out, rows
// of *ow pixels starting at scaled column *ox (libjpeg widens the crop to
// whole iMCUs). It returns 0; -1 with msg set for bad data; -2 when cap is
// too small, with *ow set to the width needed.
static int jt_decode(const unsigned char *buf, unsigned long len, int num,
		int x0, int y0, int cw, int ch,
		unsigned char *out, unsigned long cap, int *ox, int *ow, char *msg) {
	struct jpeg_decompress_struct d;
	struct errmgr e;
	JSAMPROW row[1];
	setup(&d, &e);
	if (setjmp(e.jb)) {
		strcpy(msg, e.msg);
		jpeg_destroy_decompress(&d);
		return -1;
	}
	jpeg_create_decompress(&d);
	jpeg_mem_src(&d, buf, len);
	jpeg_read_header(&d, TRUE);
	d.scale_num = num;
	d.scale_denom = 8;
	int cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
	d.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
	// The fast integer IDCT and plain chroma upsampling (TensorFlow's
	// INTEGER_FAST, fancy_upscaling=False) buy about 10% for differences
	// below the pixel noise that augmentation adds anyway.
	d.dct_method = JDCT_IFAST;
	d.do_fancy_upsampling = FALSE;
	jpeg_start_decompress(&d);
	if (x0 < 0 || y0 < 0 || cw < 1 || ch < 1 || (unsigned)(x0 + cw) > d.output_width || (unsigned)(y0 + ch) > d.output_height) {
		strcpy(msg, "crop outside the scaled image");
		jpeg_destroy_decompress(&d);
		return -1;
	}
	JDIMENSION xoff = x0, width = cw;
	if ((JDIMENSION)cw < d.output_width) {
		jpeg_crop_scanline(&d, &xoff, &width);
	}
	int comps = d.output_components;
	if (comps != 3 && comps != 4) {
		strcpy(msg, "unsupported color space");
		jpeg_destroy_decompress(&d);
		return -1;
	}
	if ((unsigned long)width * ch * 3 > cap) {
		*ow = width;
		jpeg_destroy_decompress(&d);
		return -2;
	}
	if (y0 > 0) {
		jpeg_skip_scanlines(&d, y0);
	}
	// libjpeg-turbo converts grayscale and YCbCr to RGB itself; CMYK lines
	// are decoded into a stack line and converted here.
	unsigned char last[4 * 8192];
	for (int y = 0; y < ch; y++) {
		unsigned char *dst = out + (unsigned long)y * width * 3;
		if (comps == 3) {
			row[0] = dst;
		} else if ((unsigned long)width * 4 <= sizeof last) {
			row[0] = last;
		} else {
			strcpy(msg, "CMYK line too wide");
			jpeg_destroy_decompress(&d);
			return -1;
		}
		jpeg_read_scanlines(&d, row, 1);
		if (comps == 4) {
			// Adobe CMYK JPEGs store inverted values: R = C*K/255.
			for (JDIMENSION x = 0; x < width; x++) {
				unsigned k = last[4*x+3];
				dst[3*x] = last[4*x] * k / 255;
				dst[3*x+1] = last[4*x+1] * k / 255;
				dst[3*x+2] = last[4*x+2] * k / 255;
			}
		}
	}
	int eof = e.eof;
	jpeg_abort_decompress(&d);
	jpeg_destroy_decompress(&d);
	if (eof) {
		strcpy(msg, "truncated: premature end of JPEG data");
		return -1;
	}
	*ox = xoff;
	*ow = width;
	return 0;
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// errSmall means the output buffer is too small.
var errSmall = errors.New("buffer too small")

// turboInfo reads a JPEG's width and height with libjpeg-turbo.
func turboInfo(buf []byte) (w, h int, err error) {
	if len(buf) == 0 {
		return 0, 0, errors.New("empty file")
	}
	var cw, ch C.int
	var msg [C.JMSG_LENGTH_MAX]C.char
	if C.jt_info((*C.uchar)(unsafe.Pointer(&buf[0])), C.ulong(len(buf)), &cw, &ch, &msg[0]) != 0 {
		return 0, 0, errors.New(C.GoString(&msg[0]))
	}
	return int(cw), int(ch), nil
}

// turboDecode decodes crop (x0, y0, cw, ch) of the image scaled by num/8
// into out as RGB rows of width ow starting at scaled column ox; a short out
// is grown.
func turboDecode(buf []byte, num, x0, y0, cw, ch int, out []byte) (rgb []byte, ox, ow int, err error) {
	var msg [C.JMSG_LENGTH_MAX]C.char
	for range 2 {
		if cap(out) == 0 {
			out = make([]byte, 3*cw*ch)
		}
		out = out[:cap(out)]
		var cox, cow C.int
		rc := C.jt_decode((*C.uchar)(unsafe.Pointer(&buf[0])), C.ulong(len(buf)), C.int(num),
			C.int(x0), C.int(y0), C.int(cw), C.int(ch),
			(*C.uchar)(unsafe.Pointer(&out[0])), C.ulong(len(out)), &cox, &cow, &msg[0])
		switch rc {
		case 0:
			return out, int(cox), int(cow), nil
		case -2:
			out = make([]byte, 3*int(cow)*ch)
			continue
		}
		return out, 0, 0, errors.New(C.GoString(&msg[0]))
	}
	return out, 0, 0, errSmall
}
