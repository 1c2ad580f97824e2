package logging

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"
)

// csvHeader is the long format of metrics.csv: one row per metric value.
// New metric names need no new columns, so the file is only ever appended
// to; pandas reads it with read_csv and pivots it with
// df.pivot_table(index="step", columns="name", values="value").
var csvHeader = []string{"step", "name", "value", "time"}

// CSV writes metrics.csv in the long format step,name,value,time (time in
// Unix seconds). Values are written exactly (shortest round-trip form);
// NaN and ±Inf as nan, inf, -inf, which pandas reads.
type CSV struct {
	f   *os.File
	buf *bufio.Writer
	w   *csv.Writer
	now func() time.Time
}

// OpenCSV opens path for appending. When the file exists (a resumed run),
// rows logged after resumeStep, by the interrupted run after its last
// checkpoint, are dropped first so the file has one history; pass -1 for a
// new run, which refuses an existing file rather than overwriting it.
func OpenCSV(path string, resumeStep int64) (*CSV, error) {
	if resumeStep >= 0 {
		if err := truncateAfter(path, resumeStep); err != nil {
			return nil, err
		}
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if resumeStep < 0 {
		flags |= os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	c := &CSV{f: f, buf: bufio.NewWriter(f), now: time.Now}
	c.w = csv.NewWriter(c.buf)
	if st.Size() == 0 {
		c.w.Write(csvHeader)
	}
	return c, c.flush()
}

// truncateAfter rewrites path without rows whose step exceeds step, via a
// temporary file renamed into place. Rows that do not parse (a row torn by
// a kill or a full disk) are dropped rather than blocking every resume.
func truncateAfter(path string, step int64) error {
	in, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	r := csv.NewReader(bufio.NewReader(in))
	r.FieldsPerRecord = -1
	fields := 0
	tmp := path + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	w := csv.NewWriter(out)
	for line := 1; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			continue // a torn or garbled row
		}
		if err != nil {
			out.Close()
			return fmt.Errorf("%s: %w", path, err)
		}
		if line == 1 {
			fields = len(rec)
		} else if s, err := strconv.ParseInt(rec[0], 10, 64); err != nil || len(rec) != fields || s > step {
			continue
		}
		w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Log appends one row per metric and flushes them to the file.
func (c *CSV) Log(step int64, metrics map[string]float64) error {
	ts := strconv.FormatFloat(float64(c.now().UnixMilli())/1000, 'f', 3, 64)
	s := strconv.FormatInt(step, 10)
	for _, k := range sortedKeys(metrics) {
		c.w.Write([]string{s, k, formatValue(metrics[k]), ts})
	}
	return c.flush()
}

func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func (c *CSV) flush() error {
	c.w.Flush()
	if err := c.w.Error(); err != nil {
		return err
	}
	return c.buf.Flush()
}

// Close flushes and closes the file.
func (c *CSV) Close() error {
	err := c.flush()
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Series is one metric's history from metrics.csv, in file order.
type Series struct {
	Name  string
	Step  []float64
	Value []float64
}

// ReadCSV reads a metrics.csv that CSV wrote and returns one series per
// metric name, in the order the names first appear.
func ReadCSV(path string) ([]Series, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(bufio.NewReader(f))
	r.FieldsPerRecord = -1
	index := map[string]int{}
	var out []Series
	for line := 1; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if line == 1 {
			if len(rec) < 3 || rec[0] != "step" || rec[1] != "name" || rec[2] != "value" {
				return nil, fmt.Errorf("%s: header %q is not ortrain's step,name,value,time", path, rec)
			}
			continue
		}
		if len(rec) < 3 {
			return nil, fmt.Errorf("%s:%d: %d fields, want step,name,value,time", path, line, len(rec))
		}
		step, err := strconv.ParseInt(rec[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: step %q is not an integer", path, line, rec[0])
		}
		v, err := strconv.ParseFloat(rec[2], 64) // also reads nan, inf, -inf
		if err != nil {
			return nil, fmt.Errorf("%s:%d: value %q of %s is not a number", path, line, rec[2], rec[1])
		}
		i, ok := index[rec[1]]
		if !ok {
			i = len(out)
			index[rec[1]] = i
			out = append(out, Series{Name: rec[1]})
		}
		out[i].Step = append(out[i].Step, float64(step))
		out[i].Value = append(out[i].Value, v)
	}
}
