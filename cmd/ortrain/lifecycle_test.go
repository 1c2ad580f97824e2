package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/checkpoint"
)

// linearRun writes a configuration training linearArtifacts on synthetic
// data under root (output_dir root/outputs) and returns its path.
func linearRun(t *testing.T, root string) string {
	t.Helper()
	art := filepath.Join(root, "art")
	linearArtifacts(t, art)
	cfg := filepath.Join(root, "run.toml")
	if err := os.WriteFile(cfg, []byte(`name = "lin"
output_dir = "`+filepath.Join(root, "outputs")+`"
[model]
artifacts = "`+art+`"
[data]
kind = "synthetic"
batch_size = 16
num_workers = 1
[trainer]
device = "cpu"
max_steps = 4
log_every_n_steps = 1
checkpoint_every_n_steps = 2
[optimizer]
lr = 0.05
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ortrain runs the command line in this process; it returns the exit
// code and stderr.
func ortrain(args ...string) (int, string) {
	var out, errOut bytes.Buffer
	code := run(append([]string{"ortrain"}, args...), &out, &errOut)
	return code, errOut.String()
}

// TestOverwriteRunDir: --run-dir DIR --overwrite replaces the run in DIR
// only once the new run's setup succeeded: a setup that fails leaves the
// old run as it was; a DIR that holds the run's own --config is refused,
// and nothing is deleted.
func TestOverwriteRunDir(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := linearRun(t, root)
	dir := filepath.Join(root, "run")
	if code, msg := ortrain("train", "--config", cfg, "--run-dir", dir); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, msg)
	}
	before := snapshot(t, dir)
	delete(before, filepath.Join(dir, ".lock"))
	same := func(what string) {
		t.Helper()
		after := snapshot(t, dir)
		delete(after, filepath.Join(dir, ".lock"))
		if !maps.Equal(before, after) {
			t.Errorf("%s changed the run:\nbefore %v\nafter  %v", what, before, after)
		}
	}

	// Initial weights that are refused once the run directory is open.
	absent := filepath.Join(root, "absent.safetensors")
	if code, msg := ortrain("train", "--config", cfg, "--run-dir", dir, "--overwrite", "--set", `model.init_weights="`+absent+`"`); code != 2 || !strings.Contains(msg, absent) {
		t.Errorf("overwrite with absent initial weights: exit %d: %s; want 2 naming them", code, msg)
	}
	same("an overwrite whose setup failed")

	// The configuration inside the run directory.
	inside := filepath.Join(dir, "mine.toml")
	b, _ := os.ReadFile(cfg)
	os.WriteFile(inside, b, 0o644)
	before[inside] = snapshot(t, dir)[inside]
	if code, msg := ortrain("train", "--config", inside, "--run-dir", dir, "--overwrite"); code != 2 || !strings.Contains(msg, "holds --config") {
		t.Errorf("overwrite of the folder holding --config: exit %d: %s; want 2", code, msg)
	}
	same("a refused overwrite")
	os.Remove(inside)
	delete(before, inside)

	// A run setup that succeeds replaces the old one.
	if code, msg := ortrain("train", "--config", cfg, "--run-dir", dir, "--overwrite", "--set", "trainer.max_steps=2"); code != 0 {
		t.Fatalf("overwrite: exit %d: %s", code, msg)
	}
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".ortrain-replaced") {
			t.Errorf("the replaced run is still there: %s", de.Name())
		}
	}
	if st, err := checkpoint.ReadState(filepath.Join(dir, "checkpoints", "last")); err != nil || st.Step != 2 {
		t.Errorf("the new run's checkpoint: %+v, %v; want step 2", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoints", "step-000000004")); !os.IsNotExist(err) {
		t.Errorf("the old run's checkpoint survived the overwrite: %v", err)
	}
}

// TestRunDirFlagsRefused: flags that would be ignored are refused with
// exit 2 before anything is written: --resume with --run-dir, --overwrite
// without --run-dir, an empty --resume; a --run-dir that is a file is
// exit 2 too.
func TestRunDirFlagsRefused(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := linearRun(t, root)
	if code, msg := ortrain("train", "--config", cfg, "--set", "trainer.max_steps=2"); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, msg)
	}
	version := filepath.Join(root, "outputs", "lin", "version_0")
	before := snapshot(t, filepath.Join(root, "outputs"))
	for _, c := range []struct {
		args []string
		say  string
	}{
		{[]string{"--resume", version, "--run-dir", filepath.Join(root, "new")}, "give one of them"},
		{[]string{"--overwrite"}, "--overwrite replaces the run in --run-dir"},
		{[]string{"--resume", ""}, "--resume is empty"},
		{[]string{"--run-dir", cfg}, "not a directory"},
	} {
		code, msg := ortrain(append([]string{"train", "--config", cfg, "--set", "trainer.max_steps=3"}, c.args...)...)
		if code != 2 || !strings.Contains(msg, c.say) {
			t.Errorf("train %q: exit %d: %s; want 2 saying %q", c.args, code, msg, c.say)
		}
	}
	if after := snapshot(t, filepath.Join(root, "outputs")); !maps.Equal(before, after) {
		t.Errorf("refused commands changed the outputs:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := os.Stat(filepath.Join(root, "new")); !os.IsNotExist(err) {
		t.Errorf("a refused command made its --run-dir: %v", err)
	}
}

// TestResumeRefusedWritesNothing: a resume refused by what only restoring
// the checkpoint finds (here its scheduler state) writes nothing into the
// run: no config.resume-1.toml for the changed max_steps, no events file,
// metrics.csv not cut.
func TestResumeRefusedWritesNothing(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := linearRun(t, root)
	if code, msg := ortrain("train", "--config", cfg); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, msg)
	}
	version := filepath.Join(root, "outputs", "lin", "version_0")
	ck := filepath.Join(version, "checkpoints", "step-000000004")
	var st map[string]any
	b, _ := os.ReadFile(filepath.Join(ck, checkpoint.StateFile))
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	st["scheduler"] = "oops"
	b, _ = json.Marshal(st)
	os.WriteFile(filepath.Join(ck, checkpoint.StateFile), b, 0o644)
	before := snapshot(t, version)
	code, msg := ortrain("train", "--config", cfg, "--resume", ck, "--set", "trainer.max_steps=6")
	if code == 0 || !strings.Contains(msg, "scheduler") {
		t.Errorf("resume from a checkpoint with a damaged scheduler: exit %d: %s; want a refusal", code, msg)
	}
	if after := snapshot(t, version); !maps.Equal(before, after) {
		t.Errorf("the refused resume changed the run:\nbefore %v\nafter  %v", before, after)
	}
}

// startCLI starts ortrain in a child process (this test binary acting as
// the command) with stderr into a buffer.
func startCLI(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asCLI+"=1")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &errOut
}

// waitFor polls until ok, or fails the test after a minute.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// childExit is the exit status of a finished child, -1 when a signal
// killed it.
func childExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatal(err)
	return 0
}

// slowRun writes a configuration whose steps take a while (a small
// ResNet on 160-pixel synthetic images, about 0.25 s a step on a CPU core)
// and returns its path; its artifacts are built into the run directory.
func slowRun(t *testing.T, root string) string {
	t.Helper()
	cfg := filepath.Join(root, "slow.toml")
	if err := os.WriteFile(cfg, []byte(`name = "slow"
output_dir = "`+filepath.Join(root, "outputs")+`"
[model]
recipe = "resnet"
[model.params]
depth = 18
width = 8
image_size = 160
[data]
kind = "synthetic"
batch_size = 16
num_workers = 1
[trainer]
device = "cpu"
max_steps = 1000000
log_every_n_steps = 1
checkpoint_every_n_steps = 1000000
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestSignalTwiceCountsOnce: one SIGTERM delivered twice in a moment (GNU
// timeout signals the process and then its group) stops training as one
// signal does: the step finishes, a checkpoint is written, exit 0. A
// second signal of another kind still exits at once with 130.
func TestSignalTwiceCountsOnce(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := slowRun(t, root)
	for _, c := range []struct {
		second syscall.Signal
		code   int
		say    string
	}{
		{syscall.SIGTERM, 0, "interrupted; checkpoint written"},
		{syscall.SIGINT, 130, "exiting without a new checkpoint"},
	} {
		dir := filepath.Join(root, "run-"+c.second.String())
		cmd, errOut := startCLI(t, "train", "--config", cfg, "--run-dir", dir)
		waitFor(t, "a logged step", func() bool {
			b, _ := os.ReadFile(filepath.Join(dir, "metrics.csv"))
			return strings.Count(string(b), "\n") > 1
		})
		cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(20 * time.Millisecond) // within a step
		cmd.Process.Signal(c.second)
		code := childExit(t, cmd)
		if code != c.code || !strings.Contains(errOut.String(), c.say) {
			t.Errorf("SIGTERM then %v: exit %d; want %d saying %q:\n%s", c.second, code, c.code, c.say, errOut.String())
		}
		if c.code == 0 {
			if _, err := checkpoint.ReadState(filepath.Join(dir, "checkpoints", "last")); err != nil {
				t.Errorf("no checkpoint after SIGTERM twice: %v", err)
			}
		}
	}
}

// TestInterruptDuringSetup: SIGINT while the run is being set up (its
// artifacts built) ends the command at once with 130, saying so, and
// leaves nothing: the version directory, and the output directory it
// made, are removed.
func TestInterruptDuringSetup(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := slowRun(t, root)
	version := filepath.Join(root, "outputs", "slow", "version_0")
	cmd, errOut := startCLI(t, "train", "--config", cfg)
	waitFor(t, "the version directory", func() bool {
		_, err := os.Stat(version)
		return err == nil
	})
	cmd.Process.Signal(syscall.SIGINT)
	code := childExit(t, cmd)
	if code != 130 || !strings.Contains(errOut.String(), "interrupted before training started; removed "+version) {
		t.Errorf("SIGINT during setup: exit %d; want 130 saying so:\n%s", code, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(root, "outputs")); !os.IsNotExist(err) {
		t.Errorf("an interrupted setup left %s (%v)", filepath.Join(root, "outputs"), err)
	}
}

// TestSignalRepeatWindow: the same signal again within repeatWindow is
// the first delivered twice; another kind, or the same later, is a second.
func TestSignalRepeatWindow(t *testing.T) {
	var f firstSignal
	if f.again(syscall.SIGTERM) || f.again(syscall.SIGTERM) {
		t.Error("the first SIGTERM, or it again at once, counted as a second signal")
	}
	if !f.again(syscall.SIGINT) {
		t.Error("SIGINT after SIGTERM did not count as a second signal")
	}
	f.at = f.at.Add(-repeatWindow)
	if !f.again(syscall.SIGTERM) {
		t.Error("SIGTERM after the window did not count as a second signal")
	}
}
