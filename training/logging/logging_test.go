package logging

import (
	"encoding/binary"
	"encoding/csv"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestCRC32C checks the checksum against published CRC-32C vectors
// (RFC 3720 B.4 and the common "123456789" check value) and the masking
// against its definition.
func TestCRC32C(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want uint32
	}{
		{[]byte("123456789"), 0xe3069283},
		{make([]byte, 32), 0x8a9136aa},
		{[]byte(strings.Repeat("\xff", 32)), 0x62a8ab43},
	} {
		c := crc32Of(tc.in)
		if c != tc.want {
			t.Errorf("CRC-32C(%q) = %#x, want %#x", tc.in, c, tc.want)
		}
		if m := maskedCRC(tc.in); m != ((c>>15)|(c<<17))+0xa282ead8 {
			t.Errorf("masked CRC %#x", m)
		}
	}
}

type event struct {
	wall    float64
	step    int64
	version string
	values  map[string]float32
	// start is a SessionLog with status START (a resumed run's marker).
	start bool
}

// readEvents parses a TFRecord event file independently of the writer's
// code paths, checking both CRCs of every record.
func readEvents(t *testing.T, path string) []event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []event
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("%d trailing bytes", len(b))
		}
		n := binary.LittleEndian.Uint64(b)
		if got, want := binary.LittleEndian.Uint32(b[8:]), mask(crc32Of(b[:8])); got != want {
			t.Fatalf("length CRC %#x, want %#x", got, want)
		}
		data := b[12 : 12+n]
		if got, want := binary.LittleEndian.Uint32(b[12+n:]), mask(crc32Of(data)); got != want {
			t.Fatalf("data CRC %#x, want %#x", got, want)
		}
		b = b[16+n:]
		ev := event{values: map[string]float32{}}
		for len(data) > 0 {
			num, typ, n := protowire.ConsumeTag(data)
			data = data[n:]
			switch {
			case num == 1 && typ == protowire.Fixed64Type:
				v, n := protowire.ConsumeFixed64(data)
				ev.wall, data = math.Float64frombits(v), data[n:]
			case num == 2 && typ == protowire.VarintType:
				v, n := protowire.ConsumeVarint(data)
				ev.step, data = int64(v), data[n:]
			case num == 3 && typ == protowire.BytesType:
				v, n := protowire.ConsumeString(data)
				ev.version, data = v, data[n:]
			case num == 5 && typ == protowire.BytesType:
				s, n := protowire.ConsumeBytes(data)
				data = data[n:]
				for len(s) > 0 {
					_, _, n := protowire.ConsumeTag(s)
					val, m := protowire.ConsumeBytes(s[n:])
					s = s[n+m:]
					var tag string
					var x float32
					for len(val) > 0 {
						num, _, n := protowire.ConsumeTag(val)
						val = val[n:]
						if num == 1 {
							v, n := protowire.ConsumeString(val)
							tag, val = v, val[n:]
						} else {
							v, n := protowire.ConsumeFixed32(val)
							x, val = math.Float32frombits(v), val[n:]
						}
					}
					ev.values[tag] = x
				}
			case num == 7 && typ == protowire.BytesType:
				sl, n := protowire.ConsumeBytes(data)
				data = data[n:]
				if num, typ, n := protowire.ConsumeTag(sl); num == 1 && typ == protowire.VarintType {
					v, _ := protowire.ConsumeVarint(sl[n:])
					ev.start = v == 1
				}
			default:
				t.Fatalf("unexpected field %d type %d", num, typ)
			}
		}
		out = append(out, ev)
	}
	return out
}

func crc32Of(b []byte) uint32 {
	var c uint32 = 0xffffffff
	for _, x := range b {
		c ^= uint32(x)
		for i := 0; i < 8; i++ {
			if c&1 != 0 {
				c = c>>1 ^ 0x82f63b78
			} else {
				c >>= 1
			}
		}
	}
	return ^c
}

func mask(c uint32) uint32 { return (c>>15 | c<<17) + 0xa282ead8 }

// TestTensorBoard checks that the event file starts with the version record
// and holds each logged scalar at its step.
func TestTensorBoard(t *testing.T) {
	dir := t.TempDir()
	tb, err := NewTensorBoard(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(tb.Path()), "events.out.tfevents.") {
		t.Errorf("file name %s", tb.Path())
	}
	tb.Log(10, map[string]float64{"train/loss": 2.5, "lr": 1e-4})
	tb.Log(20, map[string]float64{"train/loss": 1.25, "gpu/mem_used_gib": 30})
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	evs := readEvents(t, tb.Path())
	if len(evs) != 3 || evs[0].version != "brain.Event:2" {
		t.Fatalf("events %+v", evs)
	}
	if evs[1].step != 10 || evs[1].values["train/loss"] != 2.5 || evs[1].values["lr"] != float32(1e-4) {
		t.Errorf("event 1 = %+v", evs[1])
	}
	if evs[2].step != 20 || !reflect.DeepEqual(evs[2].values, map[string]float32{"train/loss": 1.25, "gpu/mem_used_gib": 30}) {
		t.Errorf("event 2 = %+v", evs[2])
	}
	if evs[1].wall < 1.6e9 {
		t.Errorf("wall time %v is not Unix seconds", evs[1].wall)
	}
	tb2, err := NewTensorBoard(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tb2.Path() == tb.Path() {
		t.Error("second writer reused the first file")
	}
	// A resume from step 10 marks a session START at step 11, on which
	// TensorBoard drops the first file's points from step 11 on.
	if err := tb2.Restart(10); err != nil {
		t.Fatal(err)
	}
	tb2.Close()
	evs = readEvents(t, tb2.Path())
	if len(evs) != 2 || !evs[1].start || evs[1].step != 11 {
		t.Errorf("after Restart(10): events %+v, want the version then a START at step 11", evs)
	}
}

// TestCSVResume checks the long format, exact values, refusal to overwrite,
// and that a resume drops rows after the resumed step.
func TestCSVResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.csv")
	c, err := OpenCSV(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	for s := int64(1); s <= 4; s++ {
		c.Log(s*10, map[string]float64{"loss": 1 / float64(s), "lr": 0.1})
	}
	c.Log(50, map[string]float64{"loss": math.NaN()})
	c.Close()
	if _, err := OpenCSV(path, -1); err == nil {
		t.Error("a new run opened an existing metrics.csv")
	}
	c, err = OpenCSV(path, 20)
	if err != nil {
		t.Fatal(err)
	}
	c.Log(30, map[string]float64{"loss": 0.3})
	c.Close()
	f, _ := os.Open(path)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, strings.Join(r[:3], ","))
	}
	want := []string{"step,name,value", "10,loss,1", "10,lr,0.1", "20,loss,0.5", "20,lr,0.1", "30,loss,0.3"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows\n%v\nwant\n%v", got, want)
	}
}

// TestCSVResumeAfterTornRow: a row cut short by a kill or a full disk
// (here the last one, without its newline) does not block the resume; it
// is dropped with the rows after the resumed step.
func TestCSVResumeAfterTornRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.csv")
	c, err := OpenCSV(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	c.Log(10, map[string]float64{"loss": 1})
	c.Log(20, map[string]float64{"loss": 0.5})
	c.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("30,lo")
	f.Close()
	c, err = OpenCSV(path, 20)
	if err != nil {
		t.Fatalf("resume after a torn row: %v", err)
	}
	c.Log(30, map[string]float64{"loss": 0.3})
	c.Close()
	b, _ := os.ReadFile(path)
	rows, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
	if err != nil {
		t.Fatalf("metrics.csv after the resume: %v\n%s", err, b)
	}
	if len(rows) != 4 || rows[3][0] != "30" || rows[3][2] != "0.3" {
		t.Errorf("rows %v, want the header, steps 10, 20 and the new 30", rows)
	}
}

type failing struct{ closed *bool }

func (f failing) Log(int64, map[string]float64) error { return errors.New("disk full") }
func (f failing) Close() error                        { *f.closed = true; return nil }

// TestMulti checks that a failing logger does not stop the others.
func TestMulti(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.csv")
	c, err := OpenCSV(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	m := Multi(failing{&closed}, c)
	if err := m.Log(1, map[string]float64{"a": 1}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Log = %v", err)
	}
	if err := m.Close(); err != nil || !closed {
		t.Errorf("Close = %v, closed %v", err, closed)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "1,a,1,") {
		t.Errorf("csv logger skipped after a failure: %q", b)
	}

}

func TestReadCSVReadsWhatCSVWrote(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.csv")
	c, err := OpenCSV(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	c.Log(1, map[string]float64{"loss": 2, "lr": 0.1})
	c.Log(2, map[string]float64{"loss": math.NaN()})
	c.Log(4, map[string]float64{"loss": 0.5, "val/loss": 0.7})
	c.Close()
	got, err := ReadCSV(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Name != "loss" || got[1].Name != "lr" || got[2].Name != "val/loss" {
		t.Fatalf("series %+v, want loss, lr, val/loss in first-seen order", got)
	}
	loss := got[0]
	if len(loss.Step) != 3 || loss.Step[2] != 4 || loss.Value[0] != 2 || !math.IsNaN(loss.Value[1]) || loss.Value[2] != 0.5 {
		t.Errorf("loss series %+v, want steps 1 2 4 with 2 NaN 0.5", loss)
	}
	os.WriteFile(path, []byte("step,name,value,time\n3,loss,abc,0\n"), 0o644)
	if _, err := ReadCSV(path); err == nil || !strings.Contains(err.Error(), "metrics.csv:2") {
		t.Errorf("a bad value gave %v, want an error naming file and line", err)
	}
}
