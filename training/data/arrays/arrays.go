// Package arrays is the data kind "arrays": a model's data inputs given as
// NumPy arrays, one per input, in a folder of .npy files (x.npy,
// target.npy) or one .npz archive (np.savez(path, x=X, target=y)). The
// first axis of every array counts the samples, the same count in each;
// sample i is the slice [i] of every array. Arrays are matched to the
// model's inputs by name through data.Feeds, as every data kind's tensors
// are, and converted to the type each input takes where that keeps the
// values (float64 and float16 to float32, integers to int64, bool and
// uint8 masks to uint8).
//
// Samples are read from the files when loaded (one read per array and
// sample, at the sample's offset), so that an array larger than memory
// trains; only arrays that cannot be read that way are held in memory,
// counted against the loader's memory bound: compressed members of an
// archive (np.savez_compressed) and arrays stored in Fortran order.
package arrays

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/npy"
	"github.com/ortrain/ortrain/training/safefile"
)

// Input is one data input of the model: the name the arrays are matched
// to, the element type it takes ("float32", "int64", "uint8", "bool"; ""
// when unknown, which keeps the array's own kind) and its shape, batch
// axis first, with sizes below 1 free (nil when unknown).
type Input struct {
	Name  string
	DType string
	Shape []int64
	// Classes, for the class indices of a built-in cross-entropy, is the
	// model's class count: labels outside [0, Classes) are refused when
	// loaded (their one-hot row would be all zeros and train silently
	// wrong). 0 checks nothing.
	Classes int
}

// Config says what to open and for which model.
type Config struct {
	// Path is a folder of .npy files or an .npz archive.
	Path string
	// Inputs are the model's data inputs, a built-in loss's target
	// included. Every input needs an array and every array an input.
	// Empty when the model is not known: every array is read as its kind
	// (floats as float32, integers as int64, bool and uint8 as uint8).
	Inputs []Input
	// Feeds maps a model input to the array feeding it where the names
	// differ (data.feeds).
	Feeds data.Feeds
	// MaxBytes bounds the arrays held in memory (see the package
	// comment); 0 sets no bound.
	MaxBytes int64
}

// Error is data that cannot feed the model: File names it (an absolute
// path, with the member for an archive's array).
type Error struct {
	File string
	Msg  string
}

func (e *Error) Error() string { return e.File + ": " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *Error) BadInput() bool { return true }

// Dataset is the samples of a set of arrays. It implements data.Dataset
// and data.Cacher (the bytes of the arrays held in memory).
type Dataset struct {
	path   string
	n      int
	arrays []*array // in the order of spec
	spec   []data.TensorSpec
	held   int64
	files  []*os.File
	bufs   sync.Pool
}

// array is one .npy array and how its samples are read.
type array struct {
	name string     // the tensor's name: the file's without .npy
	file string     // for messages: the absolute path, "a.npz: x.npy" for a member
	base string     // the file's or member's own name, for lists
	h    npy.Header // shape, type, order
	typ  npy.Type
	to   data.DType
	// lo and hi bound the integers the input takes (uint8: 0 to 255,
	// bool 0 to 1, class indices 0 to classes-1); rangeWhat says so.
	lo, hi    int64
	rangeWhat string
	// elems and bytes are one sample's elements and bytes in the file.
	elems, bytes int
	// Samples are read from f at off (+ i·bytes), or from mem.
	f   *os.File
	off int64
	mem []byte
	// reshape, when set, is the sample shape the model takes, the same
	// values as the file's with other axes of size 1.
	reshape []int
	// stored is whether the array can be read in place (C order, not
	// compressed); mem is filled only for the arrays used.
	stored bool
	load   func() ([]byte, error)
}

// Open lists the arrays at cfg.Path, matches them to cfg.Inputs and
// checks them: every array has a sample axis of the same length, every
// input an array and every array an input, of a type and shape the input
// takes. Errors name the file and what is wrong with it.
func Open(cfg Config) (ds *Dataset, err error) {
	path, err := filepath.Abs(cfg.Path)
	if err != nil {
		path = cfg.Path
	}
	ds = &Dataset{path: path}
	defer func() {
		if err != nil {
			ds.Close()
			ds = nil
		}
	}()
	st, err := os.Stat(path)
	if err != nil {
		return ds, &Error{path, unwrapPath(err).Error()}
	}
	var all []*array
	switch {
	case st.IsDir():
		all, err = ds.folder(path)
	case strings.EqualFold(filepath.Ext(path), ".npz"):
		all, err = ds.archive(path, st.Size())
	case strings.EqualFold(filepath.Ext(path), ".npy"):
		return ds, &Error{path, "is one array; give the folder holding one .npy file per model input, or an .npz archive of them (np.savez)"}
	default:
		return ds, &Error{path, "is neither a folder of .npy files nor an .npz archive"}
	}
	if err != nil {
		return ds, err
	}
	if len(all) == 0 {
		return ds, &Error{path, "holds no .npy arrays; data.kind = \"arrays\" reads one .npy file per model input (x.npy, target.npy), or an .npz archive of them"}
	}
	slices.SortFunc(all, func(a, b *array) int { return strings.Compare(a.name, b.name) })
	for i, a := range all {
		if i > 0 && all[i-1].name == a.name {
			return ds, &Error{path, fmt.Sprintf("holds two arrays named %q (%s and %s)", a.name, all[i-1].base, a.base)}
		}
		if len(a.h.Shape) == 0 {
			return ds, &Error{a.file, "is a 0-d array (a scalar): the first axis of an array counts its samples"}
		}
		if a.h.Shape[0] != all[0].h.Shape[0] {
			return ds, &Error{path, fmt.Sprintf("%s has %d samples (shape %v), but %s has %d (shape %v): the first axis of every array counts the same samples",
				all[0].file, all[0].h.Shape[0], all[0].h.Shape, a.file, a.h.Shape[0], a.h.Shape)}
		}
	}
	if ds.n = all[0].h.Shape[0]; ds.n == 0 {
		return ds, &Error{path, fmt.Sprintf("the arrays hold no samples (%s has shape %v)", all[0].file, all[0].h.Shape)}
	}
	used, err := match(cfg, path, all)
	if err != nil {
		return ds, err
	}
	for _, a := range used {
		if !a.stored {
			ds.held += a.h.Len() * int64(a.typ.Size)
		}
	}
	if cfg.MaxBytes > 0 && ds.held > cfg.MaxBytes {
		var names []string
		for _, a := range used {
			if !a.stored {
				names = append(names, a.base)
			}
		}
		return ds, &Error{path, fmt.Sprintf("%s must be held in memory (compressed, or in Fortran order), %s, over the loader's bound of %s (data.memory_limit): save them with np.save or np.savez (uncompressed, C order), which are read a sample at a time",
			strings.Join(names, ", "), data.FormatBytes(ds.held), data.FormatBytes(cfg.MaxBytes))}
	}
	for _, a := range used {
		if !a.stored {
			if a.mem, err = a.load(); err != nil {
				return ds, err
			}
		}
		a.load = nil
		ds.arrays = append(ds.arrays, a)
		ds.spec = append(ds.spec, data.TensorSpec{Name: a.name, DType: a.to, Shape: a.shape()})
	}
	return ds, nil
}

// unwrapPath drops the path an fs.PathError repeats.
func unwrapPath(err error) error {
	var nf *safefile.NotFileError
	if errors.As(err, &nf) {
		return errors.New(nf.What())
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// folder lists the .npy files of dir (any case of the extension; hidden
// entries left out). Anything else there is refused: a file that feeds
// nothing must not pass for data.
func (ds *Dataset) folder(dir string) ([]*array, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, &Error{dir, unwrapPath(err).Error()}
	}
	var out []*array
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		file := filepath.Join(dir, name)
		if de.IsDir() {
			return nil, &Error{file, fmt.Sprintf("is a folder; the folder %s must hold only the arrays, one .npy file per model input", dir)}
		}
		if !strings.EqualFold(filepath.Ext(name), ".npy") {
			what := "is not a .npy array"
			if strings.EqualFold(filepath.Ext(name), ".npz") {
				what = "is an .npz archive; give it as the data path itself, or its arrays as .npy files"
			}
			return nil, &Error{file, what + fmt.Sprintf("; the folder %s must hold only the arrays, one .npy file per model input", dir)}
		}
		f, err := safefile.Open(file)
		if err != nil {
			return nil, &Error{file, unwrapPath(err).Error()}
		}
		ds.files = append(ds.files, f)
		st, err := f.Stat()
		if err != nil {
			return nil, &Error{file, err.Error()}
		}
		if st.IsDir() {
			return nil, &Error{file, fmt.Sprintf("is a folder; the folder %s must hold only the arrays, one .npy file per model input", dir)}
		}
		h, err := npy.DecodeHeader(file, io.NewSectionReader(f, 0, st.Size()), st.Size())
		if err != nil {
			return nil, err
		}
		a := &array{name: strings.TrimSuffix(name, filepath.Ext(name)), file: file, base: name, h: h, f: f, off: h.Offset}
		a.stored = inPlace(h)
		a.load = func() ([]byte, error) {
			return npy.ReadData(file, h, io.NewSectionReader(f, h.Offset, st.Size()-h.Offset))
		}
		out = append(out, a)
	}
	return out, nil
}

// archive lists the arrays of an .npz file: zip members named NAME.npy,
// stored (np.savez) or deflated (np.savez_compressed).
func (ds *Dataset) archive(path string, size int64) ([]*array, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, &Error{path, unwrapPath(err).Error()}
	}
	ds.files = append(ds.files, f)
	z, err := zip.NewReader(f, size)
	if err != nil {
		return nil, &Error{path, fmt.Sprintf("not an .npz archive (%v)", err)}
	}
	var out []*array
	for _, m := range z.File {
		file := path + ": " + m.Name
		if m.FileInfo().IsDir() {
			continue
		}
		if !strings.EqualFold(filepath.Ext(m.Name), ".npy") {
			return nil, &Error{file, "is not a .npy array; an .npz archive holds one NAME.npy member per model input (np.savez(path, NAME=array))"}
		}
		if m.Method != zip.Store && m.Method != zip.Deflate {
			return nil, &Error{file, fmt.Sprintf("compressed with zip method %d; ortrain reads stored (np.savez) and deflated (np.savez_compressed) members", m.Method)}
		}
		// The sizes the archive declares must be ones its bytes can back
		// before anything is allocated for them: a stored member lies in
		// the file, and deflate expands at most 1032-fold.
		msize, csize := int64(m.UncompressedSize64), int64(m.CompressedSize64)
		start, err := m.DataOffset()
		switch {
		case err != nil || msize < 0 || csize < 0 || start < 0 || csize > size-start:
			return nil, &Error{file, "the member's data lies outside the archive (a damaged or truncated .npz)"}
		case m.Method == zip.Store && msize != csize:
			return nil, &Error{file, fmt.Sprintf("a stored member of %d bytes declares %d bytes of data (a damaged .npz)", csize, msize)}
		case msize/1032 > csize+64:
			return nil, &Error{file, fmt.Sprintf("declares %d bytes compressed into %d, more than deflate can hold (a damaged .npz)", msize, csize)}
		}
		r, err := m.Open()
		if err != nil {
			return nil, &Error{file, err.Error()}
		}
		h, err := npy.DecodeHeader(file, r, msize)
		r.Close()
		if err != nil {
			return nil, err
		}
		a := &array{name: strings.TrimSuffix(m.Name, filepath.Ext(m.Name)), file: file, base: m.Name, h: h, f: f}
		if m.Method == zip.Store && inPlace(h) {
			a.off, a.stored = start+h.Offset, true
		}
		a.load = func() ([]byte, error) {
			r, err := m.Open()
			if err != nil {
				return nil, &Error{file, err.Error()}
			}
			defer r.Close()
			if _, err := io.CopyN(io.Discard, r, h.Offset); err != nil {
				return nil, &Error{file, err.Error()}
			}
			b, err := npy.ReadData(file, h, r)
			if err != nil {
				return nil, err
			}
			// The rest of the member checks its CRC-32.
			if _, err := io.Copy(io.Discard, r); err != nil {
				return nil, &Error{file, err.Error()}
			}
			return b, nil
		}
		out = append(out, a)
	}
	return out, nil
}

// inPlace says whether an array's samples lie whole, one after another,
// in its file: C order, or Fortran order where that is the same (one
// element per sample).
func inPlace(h npy.Header) bool {
	if !h.FortranOrder || len(h.Shape) < 2 {
		return true
	}
	n := 1
	for _, d := range h.Shape[1:] {
		n *= d
	}
	return n == 1
}

// match pairs the arrays with the model's inputs through the feeds (as
// the trainer will feed them), and sets each used array's type and sample
// shape for its input. It returns the arrays used, sorted by name.
func match(cfg Config, path string, all []*array) ([]*array, error) {
	files := make([]string, len(all))
	specs := make([]data.TensorSpec, len(all))
	for i, a := range all {
		t, err := npy.ParseType(a.h.Descr)
		if err != nil {
			return nil, &Error{a.file, err.Error()}
		}
		a.typ, a.to = t, natural(t)
		a.lo, a.hi, a.rangeWhat = math.MinInt64, math.MaxInt64, a.to.String()
		if a.to == data.Uint8 {
			a.lo, a.hi = 0, 255
		}
		a.elems = 1
		for _, d := range a.h.Shape[1:] {
			a.elems *= d
		}
		a.bytes = a.elems * t.Size
		files[i] = a.base
		specs[i] = data.TensorSpec{Name: a.name, DType: a.to, Shape: a.h.Shape[1:]}
	}
	if len(cfg.Inputs) == 0 {
		return all, nil
	}
	var inputs []string
	for _, in := range cfg.Inputs {
		inputs = append(inputs, in.Name)
	}
	fedBy := map[*array]Input{}
	for _, in := range cfg.Inputs {
		s, err := cfg.Feeds.SourceSpec(in.Name, specs)
		if err != nil {
			hint := fmt.Sprintf("name an array %s.npy, or map one with [data.feeds] %s = \"NAME\"", in.Name, in.Name)
			for _, a := range all {
				if strings.EqualFold(a.name, in.Name) {
					hint = fmt.Sprintf("names are matched exactly: rename %s to %s.npy, or map it with [data.feeds] %s = %q", a.base, in.Name, in.Name, a.name)
				}
			}
			if src, ok := cfg.Feeds[in.Name]; ok {
				hint = fmt.Sprintf("[data.feeds] %s = %q names no array", in.Name, src)
			}
			what := ""
			if in.Name == "target" {
				what = " (a built-in loss's target)"
			}
			return nil, &Error{path, fmt.Sprintf("no array feeds the model's input %q%s (the arrays: %s); %s", in.Name, what, strings.Join(files, ", "), hint)}
		}
		a := all[slices.IndexFunc(all, func(a *array) bool { return a.name == s.Name })]
		if prev, ok := fedBy[a]; ok {
			if prev.DType != in.DType || !slices.Equal(prev.Shape, in.Shape) {
				return nil, &Error{a.file, fmt.Sprintf("feeds the model's inputs %q (%s %v) and %q (%s %v), which differ", prev.Name, prev.DType, prev.Shape, in.Name, in.DType, in.Shape)}
			}
			continue
		}
		fedBy[a] = in
		if err := a.fit(in); err != nil {
			return nil, err
		}
	}
	var used []*array
	for _, a := range all {
		if _, ok := fedBy[a]; !ok {
			for k, v := range cfg.Feeds {
				if v == a.name && !slices.Contains(inputs, k) {
					return nil, &Error{a.file, fmt.Sprintf("feeds none of the model's inputs: [data.feeds] %s = %q maps it to %q, which the model does not take (its inputs: %s)",
						k, v, k, strings.Join(inputs, ", "))}
				}
			}
			return nil, &Error{a.file, fmt.Sprintf("feeds none of the model's inputs (%s): remove it, or map the input it is for with [data.feeds] INPUT = %q",
				strings.Join(inputs, ", "), a.name)}
		}
		used = append(used, a)
	}
	return used, nil
}

// natural is the loader type of an array's own kind, for a model input of
// unknown type.
func natural(t npy.Type) data.DType {
	switch {
	case t.Kind == 'f':
		return data.Float32
	case t.Kind == 'b' || (t.Kind == 'u' && t.Size == 1):
		return data.Uint8
	}
	return data.Int64
}

// kindName names an array type in words.
func kindName(t npy.Type) string {
	switch t.Kind {
	case 'f':
		return fmt.Sprintf("float%d", 8*t.Size)
	case 'i':
		return fmt.Sprintf("int%d", 8*t.Size)
	case 'u':
		return fmt.Sprintf("uint%d", 8*t.Size)
	}
	return "bool"
}

// fit sets the array's loader type and checks its sample shape for the
// model input it feeds.
func (a *array) fit(in Input) error {
	what := fmt.Sprintf("the model's input %q", in.Name)
	switch in.DType {
	case "":
	case "float32":
		a.to, a.rangeWhat = data.Float32, "float32"
	case "int64", "uint8", "bool":
		if a.typ.Kind == 'f' {
			return &Error{a.file, fmt.Sprintf("holds %s values, but %s takes %s%s: save it as integers (np.save(path, y.astype(np.%s))), values that are whole numbers",
				kindName(a.typ), what, in.DType, map[string]string{"int64": " (class indices)", "uint8": " (a mask)", "bool": " (a mask)"}[in.DType],
				map[string]string{"int64": "int64", "uint8": "uint8", "bool": "bool_"}[in.DType])}
		}
		switch {
		case in.DType == "int64" && in.Classes > 0:
			a.to, a.lo, a.hi = data.Int64, 0, int64(in.Classes)-1
			a.rangeWhat = fmt.Sprintf("class indices 0 to %d (the model has %d classes)", in.Classes-1, in.Classes)
		case in.DType == "int64":
			a.to, a.lo, a.hi, a.rangeWhat = data.Int64, math.MinInt64, math.MaxInt64, "int64"
		case in.DType == "bool":
			a.to, a.lo, a.hi, a.rangeWhat = data.Uint8, 0, 1, "bool (0 or 1)"
		default:
			a.to, a.lo, a.hi, a.rangeWhat = data.Uint8, 0, 255, "uint8 (0 to 255)"
		}
	default:
		return &Error{a.file, fmt.Sprintf("feeds %s, which takes %s: data loaders feed float32, int64, uint8 and bool inputs", what, in.DType)}
	}
	if in.Shape == nil {
		return nil
	}
	file := a.h.Shape[1:]
	var model []int64
	if len(in.Shape) > 0 {
		model = in.Shape[1:]
	}
	fixed := func(dims []int64) bool {
		for _, d := range dims {
			if d < 1 {
				return false
			}
		}
		return true
	}
	if len(model) == len(file) {
		for i, d := range model {
			if d > 0 && int(d) != file[i] {
				return &Error{a.file, fmt.Sprintf("holds samples of %v (the array is %v, first axis the samples), but %s takes %s per sample",
					file, a.h.Shape, what, dims(model))}
			}
		}
		return nil
	}
	// Shapes that differ only by axes of size 1 hold the same values in
	// the same order: a target of shape (N,) feeds a prediction [batch,
	// 1], labels of (N, 1) class indices [batch].
	if len(in.Shape) > 0 && fixed(model) && slices.Equal(squeeze64(model), squeeze(file)) {
		a.reshape = make([]int, len(model))
		for i, d := range model {
			a.reshape[i] = int(d)
		}
		return nil
	}
	return &Error{a.file, fmt.Sprintf("holds samples of %v (the array is %v, first axis the samples), but %s takes %s per sample",
		file, a.h.Shape, what, dims(model))}
}
