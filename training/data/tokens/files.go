package tokens

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ortrain/ortrain/training/safefile"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// The files GSM8K comes in: JSON lines (the original release, and what
// Hugging Face datasets' to_json writes), a JSON array (pandas' to_json with
// orient="records"), either gzipped, and Parquet (the Hugging Face hub's
// openai/gsm8k, main/train-00000-of-00001.parquet). A path may be a glob of
// shards, read in name order.

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// ReadGSM8K reads the GSM8K examples of path: a .jsonl, .json(.gz) or
// .parquet file, or a glob pattern matching several. A bad record (not an
// object, no question or answer, no "####" line) is an error naming the file
// and the line or record, or, with skipBad, is skipped and counted. A path
// with no examples at all is an error.
func ReadGSM8K(path string, skipBad bool) ([]Example, int, error) {
	files, err := gsm8kFiles(path)
	if err != nil {
		return nil, 0, err
	}
	var out []Example
	skipped := 0
	for _, f := range files {
		ex, n, err := readGSM8KFile(f, skipBad)
		skipped += n
		if err != nil {
			return nil, skipped, err
		}
		out = append(out, ex...)
	}
	if len(out) == 0 {
		name := path
		if len(files) == 1 {
			name = files[0]
		}
		msg := "no GSM8K records"
		if skipped > 0 {
			msg = fmt.Sprintf("no GSM8K records (%d bad ones skipped)", skipped)
		}
		return nil, skipped, &FileError{File: name, Err: errors.New(msg)}
	}
	return out, skipped, nil
}

// IsPattern says whether a GSM8K path is a glob pattern of shard files
// (its last element holds *, ? or [).
func IsPattern(path string) bool { return strings.ContainsAny(filepath.Base(path), "*?[") }

// gsm8kFiles resolves path to absolute file names: the file itself, or the
// matches of a glob pattern in name order.
func gsm8kFiles(path string) ([]string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	if IsPattern(path) {
		m, err := filepath.Glob(abs)
		if err != nil {
			return nil, &FileError{File: abs, Err: fmt.Errorf("not a valid pattern: %v", err)}
		}
		if len(m) == 0 {
			return nil, &FileError{File: abs, Err: errors.New("no file matches the pattern")}
		}
		return m, nil // Glob sorts
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, &FileError{File: abs, Err: err}
	}
	if st.IsDir() {
		return nil, &FileError{File: abs, Err: errors.New("is a folder: name a split's file (a Hugging Face snapshot of openai/gsm8k keeps main/train-00000-of-00001.parquet and main/test-00000-of-00001.parquet) or a pattern such as main/train-*.parquet")}
	}
	return []string{abs}, nil
}

func readGSM8KFile(path string, skipBad bool) ([]Example, int, error) {
	lower := strings.ToLower(path)
	switch {
	case strings.HasSuffix(lower, ".parquet"):
		return readParquet(path, skipBad)
	case strings.HasSuffix(lower, ".arrow"):
		return nil, 0, &FileError{File: path, Err: errors.New("an Arrow file (the datasets cache) is not read: write the split with Dataset.to_parquet or Dataset.to_json, or use the hub's Parquet files")}
	}
	f, err := safefile.Open(path)
	if err != nil {
		return nil, 0, openError(path, err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(lower, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, 0, &FileError{File: path, Err: fmt.Errorf("not gzip: %v", err)}
		}
		defer zr.Close()
		r = zr
	}
	br := bufio.NewReader(r)
	first, err := firstByte(br)
	if err != nil {
		return nil, 0, &FileError{File: path, Err: err}
	}
	if first == '[' {
		if b, _ := br.Peek(len(utf8BOM)); bytes.Equal(b, utf8BOM) {
			br.Discard(len(utf8BOM))
		}
		return parseJSONArray(path, br, skipBad)
	}
	return ParseGSM8K(path, br, skipBad)
}

// firstByte peeks at the first byte after a byte-order mark and white space;
// 0 for an empty file.
func firstByte(br *bufio.Reader) (byte, error) {
	for i := 0; ; i++ {
		b, err := br.Peek(i + 1)
		if err == io.EOF {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		c := b[i]
		if i < len(utf8BOM) && bytes.HasPrefix(utf8BOM, b) {
			continue
		}
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c, nil
		}
		if i >= 4096 { // a file of blanks: let the line parser say so
			return 0, nil
		}
	}
}

// parseJSONArray reads a JSON array of GSM8K records.
func parseJSONArray(name string, r io.Reader, skipBad bool) ([]Example, int, error) {
	dec := json.NewDecoder(r)
	if _, err := dec.Token(); err != nil { // the '[' firstByte saw
		return nil, 0, &FileError{File: name, Err: fmt.Errorf("not a JSON array: %v", err)}
	}
	var out []Example
	skipped := 0
	for i := 1; dec.More(); i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, skipped, &FileError{File: name, Row: i, Err: fmt.Errorf("not JSON: %v", err)}
		}
		e, err := parseLine(raw)
		if err != nil {
			if !skipBad {
				return nil, skipped, &FileError{File: name, Row: i, Err: err}
			}
			skipped++
			continue
		}
		out = append(out, e)
	}
	if _, err := dec.Token(); err != nil {
		return nil, skipped, &FileError{File: name, Err: fmt.Errorf("the JSON array does not end: %v", err)}
	}
	if dec.More() {
		return nil, skipped, &FileError{File: name, Err: errors.New("more after the JSON array")}
	}
	return out, skipped, nil
}

// parquetRecord is a row of a GSM8K Parquet file; pointers, because
// pyarrow writes string columns as optional.
type parquetRecord struct {
	Question *string `parquet:"question,optional"`
	Answer   *string `parquet:"answer,optional"`
	Plan     *string `parquet:"plan,optional"`
}

// readParquet reads the question, answer and (when present) plan columns of
// a Parquet file; other columns are ignored.
func readParquet(path string, skipBad bool) (out []Example, skipped int, err error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, 0, openError(path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, &FileError{File: path, Err: err}
	}
	// The Parquet library panics on some malformed files: a bad file is
	// the user's to fix, never a crash.
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &FileError{File: path, Err: fmt.Errorf("not a readable Parquet file: %v", p)}
		}
	}()
	if err := checkFooter(f, st.Size()); err != nil {
		return nil, 0, &FileError{File: path, Err: err}
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, 0, &FileError{File: path, Err: fmt.Errorf("not a Parquet file: %v", err)}
	}
	if err := checkChunks(pf.Metadata(), st.Size()); err != nil {
		return nil, 0, &FileError{File: path, Err: err}
	}
	if err := checkParquetColumns(pf.Schema()); err != nil {
		return nil, 0, &FileError{File: path, Err: err}
	}
	r := parquet.NewGenericReader[parquetRecord](pf)
	defer r.Close()
	buf := make([]parquetRecord, 256)
	row := 0
	for {
		n, rerr := r.Read(buf)
		for _, rec := range buf[:n] {
			row++
			e := Example{Question: deref(rec.Question), Answer: deref(rec.Answer), Plan: deref(rec.Plan)}
			if err := check(e); err != nil {
				if !skipBad {
					return nil, skipped, &FileError{File: path, Row: row, Err: err}
				}
				skipped++
				continue
			}
			out = append(out, e)
		}
		if rerr == io.EOF {
			return out, skipped, nil
		}
		if rerr != nil {
			return nil, skipped, &FileError{File: path, Row: row + 1, Err: rerr}
		}
	}
}

// checkFooter checks the footer's length against the file's before the
// Parquet library allocates it: a damaged length would otherwise ask for
// gigabytes, which no recover catches.
func checkFooter(f *os.File, size int64) error {
	var tail [8]byte
	if size < 12 {
		return fmt.Errorf("not a Parquet file: %d bytes", size)
	}
	if _, err := f.ReadAt(tail[:], size-8); err != nil {
		return err
	}
	if string(tail[4:]) != "PAR1" {
		return fmt.Errorf("not a Parquet file: it does not end in PAR1")
	}
	if n := int64(binary.LittleEndian.Uint32(tail[:4])); n+12 > size {
		return fmt.Errorf("not a Parquet file: its footer claims %d bytes of a %d-byte file", n, size)
	}
	return nil
}

// maxUncompressed bounds a column chunk: GSM8K's train split is 4 MB.
const maxUncompressed = 1 << 30

// checkChunks checks the column chunks' codecs, offsets and sizes against
// the file before their pages are read, for the same reason as checkFooter.
func checkChunks(md *format.FileMetaData, size int64) error {
	for g, rg := range md.RowGroups {
		for _, c := range rg.Columns {
			m := c.MetaData
			switch m.Codec {
			case format.Uncompressed, format.Snappy, format.Gzip, format.Brotli, format.Zstd, format.Lz4Raw:
			default:
				return fmt.Errorf("row group %d: column %s is compressed with %v, which ortrain does not read", g, strings.Join(m.PathInSchema, "."), m.Codec)
			}
			if m.DataPageOffset < 4 || m.DataPageOffset >= size || m.TotalCompressedSize < 0 || m.TotalCompressedSize > size ||
				m.TotalUncompressedSize < 0 || m.TotalUncompressedSize > maxUncompressed {
				return fmt.Errorf("row group %d: column %s claims %d bytes (%d compressed) at offset %d of a %d-byte file: damaged",
					g, strings.Join(m.PathInSchema, "."), m.TotalUncompressedSize, m.TotalCompressedSize, m.DataPageOffset, size)
			}
		}
	}
	return nil
}

// checkParquetColumns requires question and answer as top-level byte-array
// (string) columns (plan optional), listing the file's columns when they are not.
func checkParquetColumns(s *parquet.Schema) error {
	have := map[string]parquet.Field{}
	var names []string
	for _, f := range s.Fields() {
		have[f.Name()] = f
		names = append(names, f.Name())
	}
	for _, name := range []string{"question", "answer", "plan"} {
		f, ok := have[name]
		switch {
		case !ok && name == "plan":
		case !ok:
			return fmt.Errorf("no %q column (the file has %s): GSM8K's columns are question and answer", name, strings.Join(names, ", "))
		case !f.Leaf() || f.Repeated() || f.Type().Kind() != parquet.ByteArray:
			return fmt.Errorf("column %q is %v, not a string", name, f.Type())
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// openError names a file that could not be opened, once: a
// *safefile.NotFileError names it already.
func openError(path string, err error) error {
	var nf *safefile.NotFileError
	if errors.As(err, &nf) {
		return err
	}
	return &FileError{File: path, Err: err}
}
