package tokens

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

var threeProblems = []Example{
	{Question: "How many legs do 3 cats have?", Answer: "3*4=<<3*4=12>>12\n#### 12"},
	{Question: "What is 2+2?", Answer: "2+2=<<2+2=4>>4\n#### 4", Plan: "add"},
	{Question: "Half of 10?", Answer: "10/2=<<10/2=5>>5\n#### 5"},
}

func writeFile(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeParquet writes rows of T as the hub's files are laid out: strings
// optional (as pyarrow writes them), dictionary pages, a compression codec,
// here also more than one row group.
func writeParquet[T any](t *testing.T, path string, rows []T, opts ...parquet.WriterOption) string {
	t.Helper()
	var b bytes.Buffer
	w := parquet.NewGenericWriter[T](&b, append([]parquet.WriterOption{parquet.MaxRowsPerRowGroup(2)}, opts...)...)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, path, b.Bytes())
}

// hubRow is openai/gsm8k's schema plus the index column pandas adds.
type hubRow struct {
	Question *string `parquet:"question,optional,dict,snappy"`
	Answer   *string `parquet:"answer,optional,dict,snappy"`
	Index    int64   `parquet:"__index_level_0__"`
}

type planRow struct {
	Question string `parquet:"question,zstd"`
	Answer   string `parquet:"answer,zstd"`
	Plan     string `parquet:"plan,zstd"`
}

func ptr(s string) *string { return &s }

func sameExamples(t *testing.T, what string, got, want []Example) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d examples, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: example %d = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

// TestGSM8KParquet: the hub's Parquet layout and one with a plan column read
// as the JSONL would; a null answer is a bad record named by its row; a file
// without the columns lists the ones it has.
func TestGSM8KParquet(t *testing.T) {
	dir := t.TempDir()
	var hub []hubRow
	for i, e := range threeProblems {
		hub = append(hub, hubRow{Question: ptr(e.Question), Answer: ptr(e.Answer), Index: int64(i)})
	}
	want := []Example{threeProblems[0], {Question: threeProblems[1].Question, Answer: threeProblems[1].Answer}, threeProblems[2]}
	ex, skipped, err := ReadGSM8K(writeParquet(t, filepath.Join(dir, "train-00000-of-00001.parquet"), hub), false)
	if err != nil || skipped != 0 {
		t.Fatalf("hub layout: %v (%d skipped)", err, skipped)
	}
	sameExamples(t, "hub layout", ex, want)

	var planned []planRow
	for _, e := range threeProblems {
		planned = append(planned, planRow{e.Question, e.Answer, e.Plan})
	}
	ex, _, err = ReadGSM8K(writeParquet(t, filepath.Join(dir, "planned.parquet"), planned), false)
	if err != nil {
		t.Fatal(err)
	}
	sameExamples(t, "with plans", ex, threeProblems)

	hub[2].Answer = nil
	nulls := writeParquet(t, filepath.Join(dir, "nulls.parquet"), hub)
	if _, _, err := ReadGSM8K(nulls, false); err == nil || err.Error() != nulls+": record 3: no answer" {
		t.Errorf("null answer: %v", err)
	}
	if ex, skipped, err := ReadGSM8K(nulls, true); err != nil || len(ex) != 2 || skipped != 1 {
		t.Errorf("null answer skipped: %d examples, %d skipped, %v", len(ex), skipped, err)
	}

	type other struct {
		Prompt string `parquet:"prompt"`
		Answer string `parquet:"answer"`
	}
	wrong := writeParquet(t, filepath.Join(dir, "other.parquet"), []other{{"q", "#### 1"}})
	if _, _, err := ReadGSM8K(wrong, false); err == nil || !strings.Contains(err.Error(), `no "question" column (the file has prompt, answer)`) {
		t.Errorf("other columns: %v", err)
	}
	type numbers struct {
		Question int64  `parquet:"question"`
		Answer   string `parquet:"answer"`
	}
	typed := writeParquet(t, filepath.Join(dir, "numbers.parquet"), []numbers{{1, "#### 1"}})
	if _, _, err := ReadGSM8K(typed, false); err == nil || !strings.Contains(err.Error(), `column "question" is`) {
		t.Errorf("integer question: %v", err)
	}
}

// TestGSM8KBrokenParquet: a cut-short or corrupted Parquet file is bad
// input naming the file, never a panic.
func TestGSM8KBrokenParquet(t *testing.T) {
	dir := t.TempDir()
	var rows []planRow
	for _, e := range threeProblems {
		rows = append(rows, planRow{e.Question, e.Answer, e.Plan})
	}
	good, err := os.ReadFile(writeParquet(t, filepath.Join(dir, "good.parquet"), rows))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range [][]byte{good[:len(good)/2], good[:8], append([]byte("PAR1"), bytes.Repeat([]byte{0xff}, 64)...), flip(good, len(good)/3), flip(good, len(good)-12)} {
		p := writeFile(t, filepath.Join(dir, "bad.parquet"), b)
		var fe *FileError
		if _, _, err := ReadGSM8K(p, false); err != nil && (!errors.As(err, &fe) || !strings.HasPrefix(err.Error(), p+":")) {
			t.Errorf("case %d: %v; want bad input naming %s", i, err, p)
		}
	}
}

func flip(b []byte, at int) []byte {
	c := bytes.Clone(b)
	for i := at; i < at+8 && i < len(c); i++ {
		c[i] ^= 0x5a
	}
	return c
}

// TestGSM8KFileForms: JSON arrays (with a byte-order mark, pretty-printed),
// gzipped JSONL, globs of shards in name order; folders, .arrow files, empty
// files and patterns matching nothing are refused naming the path.
func TestGSM8KFileForms(t *testing.T) {
	dir := t.TempDir()
	arr := "\ufeff[\n  " + `{"question": "How many legs do 3 cats have?", "answer": "3*4=<<3*4=12>>12\n#### 12"},` +
		"\n  " + `{"question": "What is 2+2?", "answer": "2+2=<<2+2=4>>4\n#### 4", "plan": "add"},` +
		"\n  " + `{"question": "Half of 10?", "answer": "10/2=<<10/2=5>>5\n#### 5"}` + "\n]\n"
	ex, _, err := ReadGSM8K(writeFile(t, filepath.Join(dir, "train.json"), []byte(arr)), false)
	if err != nil {
		t.Fatal(err)
	}
	sameExamples(t, "JSON array", ex, threeProblems)

	bad := writeFile(t, filepath.Join(dir, "bad.json"), []byte(`[{"question": "q", "answer": "#### 1"}, {"question": "q", "answer": 7}, {"question": "q"}]`))
	if _, _, err := ReadGSM8K(bad, false); err == nil || !strings.HasPrefix(err.Error(), bad+": record 2: ") {
		t.Errorf("bad array element: %v", err)
	}
	if ex, skipped, err := ReadGSM8K(bad, true); err != nil || len(ex) != 1 || skipped != 2 {
		t.Errorf("bad array elements skipped: %d examples, %d skipped, %v", len(ex), skipped, err)
	}

	var jsonl bytes.Buffer
	zw := gzip.NewWriter(&jsonl)
	zw.Write([]byte("\ufeff" + `{"question": "What is 2+2?", "answer": "2+2=<<2+2=4>>4\n#### 4", "plan": "add"}` + "\r\n" + `{"question": "Half of 10?", "answer": "10/2=<<10/2=5>>5\n#### 5"}` + "\r\n"))
	zw.Close()
	writeFile(t, filepath.Join(dir, "shard-01.jsonl.gz"), jsonl.Bytes())
	writeFile(t, filepath.Join(dir, "shard-00.jsonl"), []byte(`{"question": "How many legs do 3 cats have?", "answer": "3*4=<<3*4=12>>12\n#### 12"}`+"\n"))
	ex, _, err = ReadGSM8K(filepath.Join(dir, "shard-*"), false)
	if err != nil {
		t.Fatal(err)
	}
	sameExamples(t, "shards", ex, threeProblems)

	empty := writeFile(t, filepath.Join(dir, "empty.jsonl"), []byte("\n\n"))
	arrow := writeFile(t, filepath.Join(dir, "gsm8k-train.arrow"), []byte("ARROW1"))
	for _, tc := range []struct{ path, says string }{
		{dir, dir + ": is a folder"},
		{empty, empty + ": no GSM8K records"},
		{filepath.Join(dir, "test-*.parquet"), filepath.Join(dir, "test-*.parquet") + ": no file matches"},
		{arrow, arrow + ": an Arrow file"},
		{writeFile(t, filepath.Join(dir, "x.jsonl.gz"), []byte("plain")), filepath.Join(dir, "x.jsonl.gz") + ": not gzip"},
	} {
		var fe *FileError
		if _, _, err := ReadGSM8K(tc.path, false); err == nil || !strings.HasPrefix(err.Error(), tc.says) || !errors.As(err, &fe) {
			t.Errorf("%s: %v; want %q…", tc.path, err, tc.says)
		}
	}
}

// FuzzReadParquet: any bytes in a .parquet file give examples or an error
// naming the file, never a panic.
func FuzzReadParquet(f *testing.F) {
	dir := f.TempDir()
	var rows []planRow
	for _, e := range threeProblems {
		rows = append(rows, planRow{e.Question, e.Answer, e.Plan})
	}
	var b bytes.Buffer
	w := parquet.NewGenericWriter[planRow](&b)
	w.Write(rows)
	w.Close()
	f.Add(b.Bytes())
	f.Add([]byte("PAR1PAR1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "fuzz.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		ex, _, err := ReadGSM8K(p, true)
		if err != nil {
			if !strings.HasPrefix(err.Error(), p+":") {
				t.Errorf("error does not name the file: %v", err)
			}
			return
		}
		for _, e := range ex {
			if check(e) != nil {
				t.Errorf("accepted %+v", e)
			}
		}
	})
}

// TestGSM8KFieldOfAnotherType: a field of another JSON type is named, in
// JSON lines and arrays alike.
func TestGSM8KFieldOfAnotherType(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"a.jsonl": `{"question": "q", "answer": 16}` + "\n", "a.json": `[{"question": "q", "answer": 16}]`} {
		p := writeFile(t, filepath.Join(dir, name), []byte(body))
		if _, _, err := ReadGSM8K(p, false); err == nil || !strings.Contains(err.Error(), `"answer" is a JSON number; GSM8K's fields are strings`) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestGSM8KInvalidUTF8: a question in Latin-1 (not UTF-8) is refused in
// each file form, naming the file and the line or record, instead of being
// tokenised as U+FFFD; with skip_bad_files the record is skipped.
func TestGSM8KInvalidUTF8(t *testing.T) {
	dir := t.TempDir()
	good := `{"question": "Half of 10?", "answer": "10/2=5\n#### 5"}`
	latin1 := "{\"question\": \"How many caf\xe9s?\", \"answer\": \"2\\n#### 2\"}"
	jsonl := writeFile(t, filepath.Join(dir, "train.jsonl"), []byte(good+"\n"+latin1+"\n"))
	arr := writeFile(t, filepath.Join(dir, "train.json"), []byte("["+good+",\n"+latin1+"]"))
	pq := writeParquet(t, filepath.Join(dir, "train.parquet"), []planRow{
		{Question: "Half of 10?", Answer: "#### 5"},
		{Question: "How many caf\xe9s?", Answer: "#### 2"},
	})
	for _, tc := range []struct{ path, says string }{
		{jsonl, jsonl + ":2: not valid UTF-8 (byte 27 of the record is 0xe9)"},
		{arr, arr + ": record 2: not valid UTF-8"},
		{pq, pq + ": record 2: the question is not valid UTF-8"},
	} {
		var fe *FileError
		if _, _, err := ReadGSM8K(tc.path, false); err == nil || !strings.HasPrefix(err.Error(), tc.says) || !errors.As(err, &fe) || !fe.BadInput() {
			t.Errorf("%s: %v; want %q…", filepath.Base(tc.path), err, tc.says)
		}
		if ex, skipped, err := ReadGSM8K(tc.path, true); err != nil || len(ex) != 1 || skipped != 1 {
			t.Errorf("%s skipping bad records: %d examples, %d skipped, %v", filepath.Base(tc.path), len(ex), skipped, err)
		}
	}
}
