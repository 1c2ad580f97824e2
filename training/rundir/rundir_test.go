package rundir

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ortrain/ortrain/training/checkpoint"
)

// TestNewVersions checks that versions count up past existing ones and that
// concurrent runs get distinct versions.
func TestNewVersions(t *testing.T) {
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "exp", "version_4"), 0o755); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := New(out, "exp")
			if err != nil {
				t.Error(err)
				return
			}
			defer d.Close()
			mu.Lock()
			defer mu.Unlock()
			if seen[d.Version] || d.Version < 5 {
				t.Errorf("version %d given twice or below existing ones", d.Version)
			}
			seen[d.Version] = true
			if filepath.Base(d.Path) != "version_"+itoa(d.Version) {
				t.Errorf("path %s for version %d", d.Path, d.Version)
			}
		}()
	}
	wg.Wait()
	if _, err := New(out, "a/b"); err == nil {
		t.Error("a run name with a slash was accepted")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestLockAndResume checks that a locked run cannot be opened twice and
// that a resumed run keeps its config and adds a changed one beside it.
func TestLockAndResume(t *testing.T) {
	d, err := New(t.TempDir(), "exp")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := d.WriteConfig([]byte("a = 1\n")); err != nil || filepath.Base(p) != ConfigFile {
		t.Fatalf("WriteConfig = %q, %v", p, err)
	}
	if _, err := Resume(d.Path); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Resume of a locked run = %v, want an in-use error", err)
	}
	d.Close()
	r, err := Resume(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if p, err := r.WriteConfig([]byte("a = 1\n")); err != nil || p != "" {
		t.Errorf("same config: WriteConfig = %q, %v; want nothing written", p, err)
	}
	p, err := r.WriteConfig([]byte("a = 2\n"))
	if err != nil || filepath.Base(p) != "config.resume-1.toml" {
		t.Errorf("changed config: WriteConfig = %q, %v", p, err)
	}
	if b, _ := os.ReadFile(r.File(ConfigFile)); string(b) != "a = 1\n" {
		t.Errorf("original config overwritten: %q", b)
	}
	if _, err := Resume(filepath.Join(d.Path, "nope")); err == nil {
		t.Error("Resume of a missing directory succeeded")
	}
}

// TestAtOverwrite checks that an explicit directory is only replaced with
// overwrite, and only once the new run's setup succeeded: until Commit its
// old contents are kept aside, and Discard puts them back.
func TestAtOverwrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run")
	d, err := At(p, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.File(MetricsFile), []byte("old"), 0o644)
	os.MkdirAll(filepath.Join(d.Checkpoints(), "step-000000001"), 0o755)
	os.WriteFile(filepath.Join(d.Checkpoints(), "step-000000001", "state.json"), []byte("{}"), 0o644)
	d.Close()
	if _, err := At(p, false, nil); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("At on a used directory = %v, want a refusal", err)
	}
	before := tree(t, p)

	// A setup that fails: the old run comes back as it was.
	d, err = At(p, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.File(MetricsFile)); !os.IsNotExist(err) {
		t.Errorf("overwrite: %s still there during setup", MetricsFile)
	}
	os.WriteFile(d.File(ConfigFile), []byte("new"), 0o644)
	os.MkdirAll(filepath.Join(d.Path, "artifacts"), 0o755)
	if msg, err := d.Discard(); err != nil || !strings.Contains(msg, "as it was") {
		t.Errorf("Discard = %q, %v", msg, err)
	}
	d.Close()
	if after := tree(t, p); !maps.Equal(before, after) {
		t.Errorf("a discarded overwrite changed the run:\nbefore %v\nafter  %v", before, after)
	}

	// A setup that succeeds: the old run goes.
	d, err = At(p, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	os.WriteFile(d.File(ConfigFile), []byte("new"), 0o644)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, p); len(got) != 1 || got[ConfigFile] != "new" {
		t.Errorf("after Commit the directory holds %v, want only the new config.toml", got)
	}
}

// TestRecoverKilledOverwrite: an overwrite whose process died before it
// committed or discarded (only its lock released, as the kernel does)
// leaves the old run aside; Recover, and At through it, put it back and
// remove what the new run wrote. A commit's leftover is deleted, the new
// run kept; a directory another process holds is left alone.
func TestRecoverKilledOverwrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run")
	d, err := At(p, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.File(MetricsFile), []byte("old"), 0o644)
	os.MkdirAll(filepath.Join(d.Checkpoints(), "step-000000004"), 0o755)
	os.WriteFile(filepath.Join(d.Checkpoints(), "step-000000004", "state.json"), []byte("{}"), 0o644)
	d.Close()
	before := tree(t, p)
	killed := func() {
		t.Helper()
		d, err := At(p, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(d.File(ConfigFile), []byte("new"), 0o644)
		os.MkdirAll(d.Checkpoints(), 0o755)
		d.Close() // the process dies: no Discard, no Commit
	}

	killed()
	// Held by another process: not touched.
	other, err := open(p, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := Recover(p); msg != "" || err != nil {
		t.Errorf("Recover of a directory in use = %q, %v; want nothing done", msg, err)
	}
	other.Close()
	if msg, err := Recover(p); err != nil || !strings.Contains(msg, "previous run is put back") {
		t.Errorf("Recover = %q, %v", msg, err)
	}
	if after := tree(t, p); !maps.Equal(before, after) {
		t.Errorf("a killed overwrite, recovered:\nbefore %v\nafter  %v", before, after)
	}
	if msg, err := Recover(p); msg != "" || err != nil {
		t.Errorf("Recover again = %q, %v; want nothing to do", msg, err)
	}

	// At recovers first: a refused At (no overwrite) still puts it back,
	// and an overwrite moves aside the old run, not the leftover.
	killed()
	if _, err := At(p, false, nil); err == nil {
		t.Error("At without overwrite on a run: no refusal")
	}
	if after := tree(t, p); !maps.Equal(before, after) {
		t.Errorf("a killed overwrite, then At refused:\nbefore %v\nafter  %v", before, after)
	}
	killed()
	d, err = At(p, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Recovered, "put back") {
		t.Errorf("At's Recovered = %q", d.Recovered)
	}
	if _, err := d.Discard(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if after := tree(t, p); !maps.Equal(before, after) {
		t.Errorf("a killed overwrite, then one discarded:\nbefore %v\nafter  %v", before, after)
	}

	// Killed while Commit deleted the old run: the new run stays.
	d, err = At(p, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.File(ConfigFile), []byte("new"), 0o644)
	gone := filepath.Join(p, discardedPrefix+"123")
	if err := os.Rename(d.replaced, gone); err != nil {
		t.Fatal(err)
	}
	d.replaced = ""
	d.Close()
	if _, err := Recover(p); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, p); len(got) != 1 || got[ConfigFile] != "new" {
		t.Errorf("after a commit cut off, Recover left %v; want only the new run", got)
	}
}

// TestAtOverwriteRefuses: --overwrite deletes nothing of a directory that
// is not an ortrain run, or that holds the run's own inputs, and says why;
// a file is not a run directory.
func TestAtOverwriteRefuses(t *testing.T) {
	root := t.TempDir()
	notRun := filepath.Join(root, "notes")
	os.MkdirAll(filepath.Join(notRun, "sub"), 0o755)
	os.WriteFile(filepath.Join(notRun, "important.txt"), []byte("precious"), 0o644)
	before := tree(t, notRun)
	_, err := At(notRun, true, nil)
	if e, ok := err.(*Error); !ok || !e.BadInput() || !strings.Contains(err.Error(), "important.txt") || !strings.Contains(err.Error(), "no ortrain run") {
		t.Errorf("overwrite of a folder that is no run = %v", err)
	}
	if after := tree(t, notRun); !maps.Equal(before, after) {
		t.Errorf("refused overwrite changed %s: %v", notRun, after)
	}

	run := filepath.Join(root, "run")
	os.MkdirAll(filepath.Join(run, "data", "train"), 0o755)
	os.WriteFile(filepath.Join(run, ConfigFile), []byte("x"), 0o644)
	before = tree(t, run)
	for _, in := range []string{filepath.Join(run, "data", "train"), run, filepath.Join(run, "data", "..", "data", "train", "x.npy")} {
		_, err = At(run, true, map[string]string{"data.val": filepath.Join(root, "elsewhere"), "data.train": in})
		if e, ok := err.(*Error); !ok || !e.BadInput() || !strings.Contains(err.Error(), "holds data.train ("+in+")") {
			t.Errorf("overwrite of a run holding data.train %s = %v", in, err)
		}
	}
	if after := tree(t, run); !maps.Equal(before, after) {
		t.Errorf("refused overwrite changed %s: %v", run, after)
	}
	// A sibling whose name starts alike is not inside.
	d, err := At(run, true, map[string]string{"data.train": run + "-data"})
	if err != nil {
		t.Fatalf("overwrite with data beside the run: %v", err)
	}
	d.Discard()
	d.Close()

	file := filepath.Join(root, "run.toml")
	os.WriteFile(file, []byte("x"), 0o644)
	if _, err := At(file, false, nil); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("At on a file = %v", err)
	} else if e, ok := err.(*Error); !ok || !e.BadInput() {
		t.Errorf("At on a file: %T is not the user's to fix", err)
	}
	// A run directory that cannot be made where it is asked for (here
	// below a file; a read-only mount alike) is the user's to fix.
	if _, err := At(filepath.Join(file, "sub"), false, nil); err == nil || !strings.Contains(err.Error(), "--run-dir") {
		t.Errorf("At below a file = %v", err)
	} else if e, ok := err.(*Error); !ok || !e.BadInput() {
		t.Errorf("At below a file: %T is not the user's to fix", err)
	}
	if _, err := New(file, "exp"); err == nil || !strings.Contains(err.Error(), "output_dir") {
		t.Errorf("New below a file = %v", err)
	} else if e, ok := err.(*Error); !ok || !e.BadInput() {
		t.Errorf("New below a file: %T is not the user's to fix", err)
	}
}

// TestDiscardNew: a run directory At or New made is removed by Discard;
// an empty one At found stays, empty; a resumed one is left alone.
func TestDiscardNew(t *testing.T) {
	root := t.TempDir()
	d, err := At(filepath.Join(root, "made"), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.File(ConfigFile), []byte("x"), 0o644)
	d.Discard()
	d.Close()
	if _, err := os.Stat(d.Path); !os.IsNotExist(err) {
		t.Errorf("Discard kept the directory At made: %v", err)
	}
	empty := filepath.Join(root, "empty")
	os.Mkdir(empty, 0o755)
	d, err = At(empty, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.File(ConfigFile), []byte("x"), 0o644)
	d.Discard()
	d.Close()
	if got := tree(t, empty); len(got) != 0 {
		t.Errorf("Discard left %v in the empty directory At found", got)
	}
	// Only the lock left (a run that never got past it): empty.
	if d, err = At(empty, false, nil); err != nil {
		t.Errorf("At on a directory holding only a lock: %v", err)
	} else {
		d.Close()
	}
	n, err := New(root, "exp")
	if err != nil {
		t.Fatal(err)
	}
	n.Discard()
	n.Close()
	if _, err := os.Stat(n.Path); !os.IsNotExist(err) {
		t.Errorf("Discard kept the version New made: %v", err)
	}
	r, err := Resume(empty)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(r.File(MetricsFile), []byte("x"), 0o644)
	r.Discard()
	r.Close()
	if _, err := os.Stat(r.File(MetricsFile)); err != nil {
		t.Errorf("Discard touched a resumed run: %v", err)
	}
}

// tree maps each file under dir (but the lock) to its content, and each
// directory to "/".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || p == dir || de.Name() == lockFile {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if de.IsDir() {
			out[rel] = "/"
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBestWithoutAName: best and last pick among the runs of a name; with
// none (no configuration) they say what to give instead.
func TestBestWithoutAName(t *testing.T) {
	for _, spec := range []string{"best", "last"} {
		_, _, err := FindCheckpoint("--checkpoint", spec, t.TempDir(), "")
		fe, ok := err.(*FlagError)
		if !ok || !fe.BadInput() || !strings.HasPrefix(err.Error(), "--checkpoint "+spec+": picks from the runs of the configuration's name") {
			t.Errorf("%s without a run name: %v", spec, err)
		}
	}
}

// TestFindCheckpointSays: --resume best names best in its errors; a path
// that does not exist is said to be missing; a run's checkpoints
// directory resolves as its version directory does.
func TestFindCheckpointSays(t *testing.T) {
	out := t.TempDir()
	if _, _, err := FindCheckpoint("--resume", "best", out, "nobody"); err == nil || !strings.Contains(err.Error(), "--resume best: no earlier run named nobody") {
		t.Errorf("--resume best without a run: %v", err)
	}
	missing := filepath.Join(out, "nonexist")
	if _, _, err := FindCheckpoint("--resume", missing, out, "x"); err == nil || !strings.Contains(err.Error(), missing+": does not exist") {
		t.Errorf("--resume of a missing path: %v", err)
	}
	d, err := New(out, "exp")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m, err := checkpoint.NewManager(d.Checkpoints(), -1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	saved, err := m.Save(&checkpoint.State{Step: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ck, version, err := FindCheckpoint("--resume", d.Checkpoints()+"/", out, "exp")
	if err != nil || ck != saved || version != d.Path {
		t.Errorf("--resume RUN/checkpoints = %s, %s, %v; want %s in %s", ck, version, err, saved, d.Path)
	}
}
