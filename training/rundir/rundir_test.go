package rundir

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
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

// TestAtOverwrite checks that an explicit directory is only cleared with
// overwrite.
func TestAtOverwrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run")
	d, err := At(p, false)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.File(MetricsFile), []byte("x"), 0o644)
	d.Close()
	if _, err := At(p, false); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("At on a used directory = %v, want a refusal", err)
	}
	d, err = At(p, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := os.Stat(d.File(MetricsFile)); !os.IsNotExist(err) {
		t.Errorf("overwrite kept %s", MetricsFile)
	}
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
