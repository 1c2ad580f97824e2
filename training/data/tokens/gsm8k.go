package tokens

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Example is one GSM8K record: a question and an answer whose worked steps
// end in a "#### <final answer>" line. Plan is optional; without it the plan
// is derived from the answer (see PlanText).
type Example struct {
	Question string `json:"question"`
	Answer   string `json:"answer"`
	Plan     string `json:"plan,omitempty"`
}

// Final is the text after the answer's "####".
func (e Example) Final() string {
	_, f, _ := strings.Cut(e.Answer, "####")
	return strings.TrimSpace(f)
}

// FinalAnswer extracts the final answer from generated text as GSM8K is
// scored: the first line after the last "####", without thousands
// separators, a leading "$" or a trailing "."; ok is false when the text has
// no "####" line or nothing after it.
func FinalAnswer(text string) (answer string, ok bool) {
	i := strings.LastIndex(text, "####")
	if i < 0 {
		return "", false
	}
	a, _, _ := strings.Cut(text[i+len("####"):], "\n")
	a = strings.TrimSpace(a)
	a = strings.TrimPrefix(a, "$")
	a = strings.TrimSuffix(a, ".")
	a = strings.ReplaceAll(a, ",", "")
	a = strings.TrimSpace(a)
	return a, a != ""
}

var calc = regexp.MustCompile(`<<([^<>]*)>>`)

// PlanText is the example's plan for HDP-Diffusion's plan segment: the
// record's own "plan" when it has one, else the answer's calculator
// annotations (<<48/2=24>>), one per line, and the "#### n" line: the
// skeleton of the solution that the execution segment then writes out.
func (e Example) PlanText() string {
	if e.Plan != "" {
		return e.Plan
	}
	var b strings.Builder
	for _, m := range calc.FindAllStringSubmatch(e.Answer, -1) {
		b.WriteString(m[1])
		b.WriteByte('\n')
	}
	b.WriteString("#### ")
	b.WriteString(e.Final())
	return b.String()
}

// FileError is a GSM8K file that cannot be read, or a line of it that is
// not a GSM8K record: the user's to fix.
type FileError struct {
	File string
	Line int // a JSONL line; 0: none
	Row  int // a JSON array's element or a Parquet row, from 1; 0: none
	Err  error
}

func (e *FileError) Error() string {
	switch {
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	case e.Row > 0:
		return fmt.Sprintf("%s: record %d: %v", e.File, e.Row, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}
func (e *FileError) Unwrap() error { return e.Err }

// BadInput marks the error as bad input (exit code 2).
func (e *FileError) BadInput() bool { return true }

// maxLine bounds a JSONL line; GSM8K's longest is under 2 KB.
const maxLine = 1 << 20

// ParseGSM8K reads GSM8K-format JSONL from r; name is used in errors.
func ParseGSM8K(name string, r io.Reader, skipBad bool) ([]Example, int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var out []Example
	skipped := 0
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if line == 1 {
			b = bytes.TrimPrefix(b, utf8BOM) // Windows editors and Excel write one
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		e, err := parseLine(b)
		if err != nil {
			if !skipBad {
				return nil, skipped, &FileError{File: name, Line: line, Err: err}
			}
			skipped++
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, skipped, &FileError{File: name, Line: line + 1, Err: fmt.Errorf("line longer than %d bytes", maxLine)}
		}
		return nil, skipped, &FileError{File: name, Err: err}
	}
	return out, skipped, nil
}

func parseLine(b []byte) (Example, error) {
	var e Example
	// encoding/json would turn invalid UTF-8 into U+FFFD silently; text
	// in another encoding (Latin-1, UTF-16) must be converted, not
	// tokenised as replacement characters.
	if err := validUTF8(b); err != nil {
		return e, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&e); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return e, fmt.Errorf("%q is a JSON %s; GSM8K's fields are strings", te.Field, te.Value)
		}
		return e, fmt.Errorf("not a JSON object: %v", err)
	}
	if dec.More() {
		return e, fmt.Errorf("more than one JSON value on the line")
	}
	return e, check(e)
}

// validUTF8 says where b stops being UTF-8.
func validUTF8(b []byte) error {
	if utf8.Valid(b) {
		return nil
	}
	at := 0
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
		b = b[n:]
	}
	return fmt.Errorf("not valid UTF-8 (byte %d of the record is 0x%02x): save the file as UTF-8 (iconv -f LATIN1 -t UTF-8, or Python's open(..., encoding=...))", at+1, b[0])
}

// check says what a record lacks to be a GSM8K example.
func check(e Example) error {
	for _, f := range []struct{ name, text string }{{"question", e.Question}, {"answer", e.Answer}, {"plan", e.Plan}} {
		if !utf8.ValidString(f.text) {
			return fmt.Errorf("the %s is not valid UTF-8: save the file's text as UTF-8", f.name)
		}
	}
	switch {
	case strings.TrimSpace(e.Question) == "":
		return fmt.Errorf("no question")
	case strings.TrimSpace(e.Answer) == "":
		return fmt.Errorf("no answer")
	case !strings.Contains(e.Answer, "####"):
		return fmt.Errorf(`answer has no "####" line with the final answer`)
	}
	return nil
}
