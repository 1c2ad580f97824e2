package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ortrain/ortrain/ort"
)

func randomBytes(r *rand.Rand, n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestRoundTripEveryDType checks that tensors of every dtype, including
// scalars and empty ones, come back byte for byte with their shapes.
func TestRoundTripEveryDType(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var tensors []Tensor
	for i, d := range []ort.DType{ort.Float64, ort.Float32, ort.Float16, ort.BFloat16, ort.Int64, ort.Int32, ort.Int8, ort.Uint8, ort.Bool} {
		shape := []int64{int64(i + 1), 3}
		tensors = append(tensors, Tensor{Name: "w." + d.String(), DType: d, Shape: shape})
		n, _ := tensors[len(tensors)-1].Bytes()
		tensors[len(tensors)-1].Data = randomBytes(r, n)
	}
	tensors = append(tensors,
		Tensor{Name: "scalar", DType: ort.Float32, Shape: []int64{}, Data: []byte{0, 0, 128, 63}},
		Tensor{Name: "empty", DType: ort.Float32, Shape: []int64{0, 4}, Data: []byte{}},
	)
	streamed := randomBytes(r, 4*1000)
	tensors = append(tensors, Tensor{Name: "streamed", DType: ort.Float32, Shape: []int64{10, 100}, Write: func(w io.Writer) error {
		for off := 0; off < len(streamed); off += 333 {
			if _, err := w.Write(streamed[off:min(off+333, len(streamed))]); err != nil {
				return err
			}
		}
		return nil
	}})

	dir := filepath.Join(t.TempDir(), "ckpt")
	st := &State{Step: 7, Epoch: 1, Metrics: map[string]float64{"loss": nanValue(), "lr": 0.1}, Loader: json.RawMessage(`{"file":3,"offset":128}`), RNG: []byte{1, 2, 3}}
	if err := Save(dir, st, tensors); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var loader bytes.Buffer
	json.Compact(&loader, c.State.Loader)
	if c.State.Step != 7 || loader.String() != `{"file":3,"offset":128}` || !bytes.Equal(c.State.RNG, []byte{1, 2, 3}) {
		t.Errorf("state = %+v", c.State)
	}
	if _, ok := c.State.Metrics["loss"]; ok || c.State.Metrics["lr"] != 0.1 {
		t.Errorf("metrics %v: want NaN loss dropped, lr kept", c.State.Metrics)
	}
	if got := len(c.Tensors.Tensors()); got != len(tensors) {
		t.Errorf("%d tensors stored, want %d", got, len(tensors))
	}
	for _, want := range tensors {
		info, ok := c.Tensors.Info(want.Name)
		if !ok {
			t.Errorf("tensor %q missing", want.Name)
			continue
		}
		if info.DType != want.DType || !slices.Equal(info.Shape, want.Shape) {
			t.Errorf("tensor %q: %s%v, want %s%v", want.Name, info.DType, info.Shape, want.DType, want.Shape)
		}
		got, err := c.Tensors.Read(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		data := want.Data
		if data == nil {
			data = streamed
		}
		if !bytes.Equal(got, data) {
			t.Errorf("tensor %q: data differs", want.Name)
		}
	}
	// The data section is 8-byte aligned, as safetensors readers expect.
	raw, _ := os.ReadFile(filepath.Join(dir, TensorsFile))
	if n := int(raw[0]) | int(raw[1])<<8 | int(raw[2])<<16; n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
}

// TestSaveRefuses checks inputs Save must refuse, leaving nothing behind.
func TestSaveRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"short data", []Tensor{{Name: "a", DType: ort.Float32, Shape: []int64{2}, Data: []byte{1, 2, 3}}}, "3 bytes of data"},
		{"unknown dtype", []Tensor{{Name: "a", DType: ort.DType(99), Shape: []int64{1}, Data: []byte{1}}}, "unknown dtype"},
		{"duplicate", []Tensor{{Name: "a", DType: ort.Uint8, Shape: []int64{1}, Data: []byte{1}}, {Name: "a", DType: ort.Uint8, Shape: []int64{1}, Data: []byte{1}}}, "duplicate"},
		{"stream too short", []Tensor{{Name: "a", DType: ort.Uint8, Shape: []int64{4}, Write: func(w io.Writer) error { _, err := w.Write([]byte{1}); return err }}}, "wrote 1 bytes, want 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			err := Save(filepath.Join(root, "c"), &State{}, tc.tensors)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Save = %v, want an error containing %q", err, tc.want)
			}
			if des, _ := os.ReadDir(root); len(des) != 0 {
				t.Errorf("failed save left %v", des)
			}
		})
	}
	dir := filepath.Join(t.TempDir(), "c")
	if err := Save(dir, &State{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := Save(dir, &State{}, nil); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second Save to the same directory = %v, want a refusal", err)
	}
}

// TestCorruptFiles checks that damaged checkpoints give a clear error naming
// the file, and that Latest passes over them.
func TestCorruptFiles(t *testing.T) {
	tensors := []Tensor{{Name: "w", DType: ort.Float32, Shape: []int64{256}, Data: make([]byte, 1024)}}
	for _, tc := range []struct {
		name    string
		damage  func(path string) error
		want    string
		skipped bool // Latest no longer returns the damaged checkpoint
	}{
		{"truncated", func(p string) error { return os.Truncate(p, 500) }, "truncated", true},
		{"empty", func(p string) error { return os.Truncate(p, 0) }, "too short", true},
		{"trailing bytes", func(p string) error {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("xx"))
			return err
		}, "trailing", true},
		{"huge header length", func(p string) error { return patch(p, 0, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}) }, "header length", true},
		{"header not JSON", func(p string) error { return patch(p, 8, []byte("#")) }, "not JSON", true},
		{"flipped data byte", func(p string) error { return patch(p, -1, []byte{0xAA}) }, "SHA-256", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			good, bad := filepath.Join(root, "step-000000001"), filepath.Join(root, "step-000000002")
			if err := Save(good, &State{Step: 1}, tensors); err != nil {
				t.Fatal(err)
			}
			if err := Save(bad, &State{Step: 2}, tensors); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(bad, TensorsFile)
			if err := tc.damage(file); err != nil {
				t.Fatal(err)
			}
			_, err := Load(bad)
			var ce *CorruptError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want a CorruptError naming %s and containing %q", err, file, tc.want)
			}
			latest, err := Latest(root)
			if err != nil {
				t.Fatal(err)
			}
			if (latest == good) != tc.skipped {
				t.Errorf("Latest = %s; damaged one skipped = %v, want %v", latest, latest == good, tc.skipped)
			}
		})
	}
}

// patch overwrites bytes at off (negative: from the end).
func patch(path string, off int64, b []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if off < 0 {
		st, _ := f.Stat()
		off += st.Size()
	}
	_, err = f.WriteAt(b, off)
	return err
}

// TestCrashBetweenSteps stops Save at each step and checks that Latest still
// finds the previous checkpoint whole at that moment.
func TestCrashBetweenSteps(t *testing.T) {
	root := t.TempDir()
	tensors := []Tensor{{Name: "w", DType: ort.Float32, Shape: []int64{64}, Data: make([]byte, 256)}}
	prev := filepath.Join(root, "step-000000001")
	if err := Save(prev, &State{Step: 1}, tensors); err != nil {
		t.Fatal(err)
	}
	checks := 0
	check := func() {
		checks++
		got, err := Latest(root)
		if err != nil || got != prev {
			t.Errorf("during save, Latest = %q, %v; want %q", got, err, prev)
		}
		if c, err := Load(got); err != nil {
			t.Errorf("during save, Load(%s): %v", got, err)
		} else {
			c.Close()
		}
	}
	testHooks = hooks{afterTensors: check, afterState: check, beforeRename: check}
	defer func() { testHooks = hooks{} }()
	next := filepath.Join(root, "step-000000002")
	if err := Save(next, &State{Step: 2}, tensors); err != nil {
		t.Fatal(err)
	}
	if checks != 3 {
		t.Errorf("%d hooks ran, want 3", checks)
	}
	if got, _ := Latest(root); got != next {
		t.Errorf("after save, Latest = %q, want %q", got, next)
	}
}

// TestTopK checks which checkpoints a Manager keeps.
func TestTopK(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name          string
		topK          int
		monitor, mode string
		scores        []*float64 // step i+1 saved with scores[i]
		keep          []int64    // steps left, ascending
		best          int64
	}{
		{"min keeps two lowest and newest", 2, "val/loss", "min", []*float64{f(5), f(3), f(4), f(1), f(6)}, []int64{2, 4, 5}, 4},
		{"max", 2, "val/acc", "max", []*float64{f(0.1), f(0.9), f(0.5), f(0.7)}, []int64{2, 4}, 2},
		{"unmeasured rank last", 1, "val/loss", "min", []*float64{f(2), nil, nil}, []int64{1, 3}, 1},
		{"NaN ranks last", 1, "val/loss", "min", []*float64{f(9), f(nanValue()), f(7)}, []int64{3}, 3},
		{"no monitor keeps newest", 2, "", "", []*float64{nil, nil, nil, nil}, []int64{3, 4}, 4},
		{"zero keeps only newest", 0, "val/loss", "min", []*float64{f(1), f(2)}, []int64{2}, 2},
		{"minus one keeps all", -1, "val/loss", "min", []*float64{f(1), f(2), f(3)}, []int64{1, 2, 3}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m, err := NewManager(dir, tc.topK, tc.monitor, tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			var last string
			for i, s := range tc.scores {
				if last, err = m.Save(&State{Step: int64(i + 1), Score: s}, nil); err != nil {
					t.Fatal(err)
				}
			}
			var steps []int64
			for _, e := range m.Entries() {
				steps = append(steps, e.Step)
			}
			if !slices.Equal(steps, tc.keep) {
				t.Errorf("kept steps %v, want %v", steps, tc.keep)
			}
			// The directory agrees with the bookkeeping, also for a new
			// Manager as on resume.
			m2, err := NewManager(dir, tc.topK, tc.monitor, tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(m2.Entries()); got != len(tc.keep) {
				t.Errorf("directory holds %d checkpoints, want %d", got, len(tc.keep))
			}
			if b, _ := m2.Best(); b.Step != tc.best {
				t.Errorf("best step %d, want %d", b.Step, tc.best)
			}
			target, err := os.Readlink(filepath.Join(dir, LastLink))
			if err != nil || filepath.Join(dir, target) != last {
				t.Errorf("last -> %q (%v), want %s", target, err, last)
			}
			// "best" links the best scored checkpoint; Best finds it, also
			// by ranking the scores when the link is gone (older runs).
			if tc.monitor == "" || tc.topK == 0 {
				if _, err := os.Lstat(filepath.Join(dir, BestLink)); err == nil {
					t.Error("a best link without a monitor, or with only the newest kept")
				}
				if _, err := Best(dir); tc.monitor == "" && !errors.Is(err, ErrUnranked) {
					t.Errorf("Best without a monitor: %v, want ErrUnranked", err)
				}
				return
			}
			got, err := Best(dir)
			want := filepath.Join(dir, fmt.Sprintf("step-%09d", tc.best))
			if err != nil || got != want {
				t.Errorf("Best = %q, %v; want %s", got, err, want)
			}
			os.Remove(filepath.Join(dir, BestLink))
			if got, err := Best(dir); err != nil || got != want {
				t.Errorf("Best without the link = %q, %v; want %s", got, err, want)
			}
		})
	}
}

func nanValue() float64 { z := 0.0; return z / z }

// crashEnv makes the test binary act as a trainer that saves checkpoints in
// a loop until it is killed.
const crashEnv = "ORTRAIN_CHECKPOINT_CRASH_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashChild resumes from the newest checkpoint in dir and saves new ones
// through a Manager forever; tensor contents derive from the step, so the
// parent can check them.
func crashChild(dir string) {
	m, err := NewManager(dir, 2, "val/loss", "min")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	step := int64(0)
	if p, err := Latest(dir); err == nil {
		c, err := Load(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		step = c.State.Step
		c.Close()
	}
	for {
		step++
		score := float64((step * 7919) % 13)
		data := bytes.Repeat([]byte{byte(step)}, 1<<20)
		tensors := []Tensor{
			{Name: "weight", DType: ort.Float32, Shape: []int64{1 << 18}, Data: data},
			{Name: "moment", DType: ort.BFloat16, Shape: []int64{1 << 19}, Data: data},
		}
		if _, err := m.Save(&State{Step: step, Score: &score}, tensors); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// TestKilledDuringSave kills a saving process at random moments and checks
// that every time the newest checkpoint found is whole, verifies against
// its checksum and holds the data of its step, and that the run resumes.
func TestKilledDuringSave(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))
	lastStep := int64(0)
	const kills = 25
	midSave := 0 // kills that left a partial save behind
	for i := 0; i < kills; i++ {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the child has got past its first save of this life,
		// then kill it at a random moment in the following saves.
		deadline := time.Now().Add(20 * time.Second)
		for {
			if p, err := Latest(dir); err == nil && stepOf(p) > lastStep {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child made no progress: %s", stderr.String())
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(r.IntN(30_000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if stderr.Len() > 0 {
			t.Fatalf("child failed: %s", stderr.String())
		}

		if des, _ := os.ReadDir(dir); slices.ContainsFunc(des, func(de os.DirEntry) bool { return strings.HasPrefix(de.Name(), tmpPrefix) }) {
			midSave++
		}
		p, err := Latest(dir)
		if err != nil {
			t.Fatalf("kill %d: Latest: %v", i, err)
		}
		c, err := Load(p)
		if err != nil {
			t.Fatalf("kill %d: Load(%s): %v", i, p, err)
		}
		w, err := c.Tensors.Read("moment")
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if step := c.State.Step; step < lastStep || w[0] != byte(step) || w[len(w)-1] != byte(step) {
			t.Fatalf("kill %d: checkpoint %s of step %d (previous %d) holds data of step %d", i, p, step, lastStep, w[0])
		}
		lastStep = c.State.Step
	}
	// After the last kill a new Manager removes partial saves; it prunes
	// nothing until its next save (a kill between a save and its pruning
	// leaves one or more extra), which keeps top-2 + newest.
	m, err := NewManager(dir, 2, "val/loss", "min")
	if err != nil {
		t.Fatal(err)
	}
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".") {
			t.Errorf("left over after cleanup: %s", de.Name())
		}
	}
	before := len(m.Entries())
	score := 0.5
	data := make([]byte, 8)
	if _, err := m.Save(&State{Step: lastStep + 1, Score: &score}, []Tensor{{Name: "w", DType: ort.Float32, Shape: []int64{2}, Data: data}}); err != nil {
		t.Fatal(err)
	}
	if n := len(m.Entries()); n < 1 || n > 3 {
		t.Errorf("%d checkpoints kept after the next save (%d before it), want 1 to 3", n, before)
	}
	if des, _ := os.ReadDir(dir); len(des) > 3+2 { // + "last" and "best"
		t.Errorf("%d entries in %s after the next save, want at most 5", len(des), dir)
	}
	t.Logf("%d kills, %d of them during a save; resumed up to step %d; %d checkpoints before the next save", kills, midSave, lastStep, before)
}

func stepOf(dir string) int64 {
	s := strings.TrimPrefix(filepath.Base(dir), "step-")
	s, _, _ = strings.Cut(s, "-")
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// BenchmarkSave measures writing a 64 MiB checkpoint, fsyncs included
// (b.SetBytes reports MB/s).
func BenchmarkSave(b *testing.B) {
	data := make([]byte, 64<<20)
	tensors := []Tensor{{Name: "w", DType: ort.Float32, Shape: []int64{16 << 20}, Data: data}}
	root := b.TempDir()
	b.SetBytes(int64(len(data)))
	for i := 0; b.Loop(); i++ {
		if err := Save(filepath.Join(root, strconv.Itoa(i)), &State{Step: int64(i)}, tensors); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCopiedWithoutLinks: a run folder copied without its symbolic links
// (cp -rL, scp -r, zip) has real directories named last and best. They
// are not counted as more checkpoints, and the next save replaces them by
// links without an error; one that is the only copy of its checkpoint
// keeps its contents under a step name.
func TestCopiedWithoutLinks(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	src := t.TempDir()
	m, err := NewManager(src, 2, "val/loss", "min")
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range []float64{3, 1, 2} {
		if _, err := m.Save(&State{Step: int64(i + 1), Score: f(s)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "checkpoints")
	if out, err := exec.Command("cp", "-rL", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -rL: %v: %s", err, out)
	}
	for _, l := range []string{LastLink, BestLink} {
		if st, err := os.Lstat(filepath.Join(dst, l)); err != nil || !st.IsDir() {
			t.Fatalf("the copy's %s is not a directory: %v", l, err)
		}
	}
	if got, err := Latest(dst); err != nil || filepath.Base(got) != "step-000000003" {
		t.Errorf("Latest of the copy = %s, %v; want step-000000003", got, err)
	}
	m, err = NewManager(dst, 2, "val/loss", "min")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Entries()); n != 2 {
		t.Errorf("the copy holds %d checkpoints by the manager's count, want 2", n)
	}
	if _, err := m.Save(&State{Step: 4, Score: f(0.5)}, nil); err != nil {
		t.Fatalf("save in the copy: %v", err)
	}
	for l, want := range map[string]string{LastLink: "step-000000004", BestLink: "step-000000004"} {
		if target, err := os.Readlink(filepath.Join(dst, l)); err != nil || target != want {
			t.Errorf("%s -> %q, %v; want a link to %s", l, target, err, want)
		}
	}
	des, _ := os.ReadDir(dst)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	if want := []string{BestLink, LastLink, "step-000000002", "step-000000004"}; !slices.Equal(names, want) {
		t.Errorf("the copy holds %v, want %v", names, want)
	}

	// A last directory that is the only copy of its checkpoint.
	only := filepath.Join(t.TempDir(), "checkpoints")
	if err := Save(filepath.Join(only, LastLink), &State{Step: 7}, nil); err != nil {
		t.Fatal(err)
	}
	m, err = NewManager(only, -1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Entries()); n != 1 {
		t.Errorf("a last directory that is no copy: %d checkpoints, want 1", n)
	}
	m.Resume(7)
	if _, err := m.Save(&State{Step: 8}, nil); err != nil {
		t.Fatal(err)
	}
	if target, _ := os.Readlink(filepath.Join(only, LastLink)); target != "step-000000008" {
		t.Errorf("last -> %q, want step-000000008", target)
	}
	if st, err := ReadState(filepath.Join(only, "step-000000007")); err != nil || st.Step != 7 {
		t.Errorf("the checkpoint that was only in last: %v", err)
	}
}

// TestLatestAfterKillBeforeLink: a process killed between a save and the
// update of "last" leaves "last" at the one before; Latest takes the newer
// whole checkpoint, and still follows "last" to a resumed branch's newest
// over an abandoned branch's later steps.
func TestLatestAfterKillBeforeLink(t *testing.T) {
	dir := t.TempDir()
	m, err := NewManager(dir, -1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Save(&State{Step: 5}, nil); err != nil {
		t.Fatal(err)
	}
	ten := filepath.Join(dir, "step-000000010")
	if err := Save(ten, &State{Step: 10}, nil); err != nil { // saved, not linked
		t.Fatal(err)
	}
	if got, err := Latest(dir); err != nil || got != ten {
		t.Errorf("Latest = %s, %v; want %s", got, err, ten)
	}
	// A branch resumed from step 5 whose newest is step 8: last.
	m, err = NewManager(dir, -1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	m.Resume(5)
	eight, err := m.Save(&State{Step: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Latest(dir); err != nil || got != eight {
		t.Errorf("after a branch, Latest = %s, %v; want %s", got, err, eight)
	}
}
