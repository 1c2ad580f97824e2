package main

import (
	"bytes"
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

// faultEnv makes a child ortrain (startCLI) fail at a stage of train, as
// testFault: "STAGE:panic" panics on the command's goroutine,
// "STAGE:goroutine" panics on another one, which kills the process before
// any deferred cleanup runs (as the loader's allocation panic of #34 did);
// "STAGE:wait" writes the file $ORTRAIN_TEST_FAULT_MARK and waits a
// minute.
const faultEnv = "ORTRAIN_TEST_FAULT"

func init() {
	stage, how, ok := strings.Cut(os.Getenv(faultEnv), ":")
	if !ok {
		return
	}
	testFault = func(at string) {
		if at != stage {
			return
		}
		switch how {
		case "goroutine":
			go panic("injected fault (" + faultEnv + ")")
			time.Sleep(time.Minute)
		case "wait": // stands still, as a long first step does, after saying so
			os.WriteFile(os.Getenv(faultEnv+"_MARK"), nil, 0o644)
			time.Sleep(time.Minute)
			return
		}
		panic("injected fault (" + faultEnv + ")")
	}
}

// TestOverwriteIsATransaction: `train --run-dir OLD --overwrite` leaves
// OLD's finished run exactly as it was whenever the new run fails before
// its first step, however it fails (#34): a value refused by the
// configuration, absurd sizes that used to panic, a panic in setup and
// once training started (exit 3), an error in the first step (exit 1),
// and a process killed outright, whose leftover the next command on OLD
// puts back (after which OLD resumes).
func TestOverwriteIsATransaction(t *testing.T) {
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
	overwrite := func(sets ...string) (int, string) {
		args := []string{"train", "--config", cfg, "--run-dir", dir, "--overwrite"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		return ortrain(args...)
	}

	for _, tc := range []struct{ set, key string }{
		{"data.batch_size=1000000000000000000", "data.batch_size"},
		{"data.batch_size=1000000000000", "data.batch_size"},
		{"data.num_workers=1000000000000000000", "data.num_workers"},
		{"data.prefetch=1000000000000000000", "data.prefetch"},
		{"trainer.accumulate_grad_batches=1000000000000000000", "trainer.accumulate_grad_batches"},
		{"runtime.intra_op_threads=1000000000", "runtime.intra_op_threads"},
	} {
		if code, msg := overwrite(tc.set); code != 2 || !strings.Contains(msg, tc.key) || strings.Contains(msg, "panic") {
			t.Errorf("overwrite with %s: exit %d: %s; want 2 naming %s", tc.set, code, msg, tc.key)
		}
		same("an overwrite with " + tc.set)
	}

	// A panic on the command's goroutine, in setup and once training
	// started: exit 3, the old run back.
	for _, stage := range []string{"setup", "started"} {
		testFault = func(at string) {
			if at == stage {
				panic("injected fault")
			}
		}
		code, msg := overwrite()
		testFault = nil
		if code != exitBug || !strings.Contains(msg, "injected fault") {
			t.Errorf("a panic at %s: exit %d: %s; want %d", stage, code, msg, exitBug)
		}
		same("a panic at " + stage)
	}

	// The first step fails (an update too small to change a float32
	// weight): exit 1, the old run back.
	if code, msg := overwrite("optimizer.lr=1e-46"); code != 1 || !strings.Contains(msg, "changed no trainable weight") || !strings.Contains(msg, "ended before its first step") {
		t.Errorf("a first step that fails: exit %d: %s; want 1 and the old run kept", code, msg)
	}
	same("a first step that fails")

	// A process that dies at once (a panic on another goroutine runs no
	// deferred cleanup), in setup and once training started: its leftover
	// is put back by the next command on the directory.
	for _, stage := range []string{"setup", "started"} {
		cmd, errOut := startCLIEnv(t, []string{faultEnv + "=" + stage + ":goroutine"}, "train", "--config", cfg, "--run-dir", dir, "--overwrite")
		if code := childExit(t, cmd); code != 2 || !strings.Contains(errOut.String(), "injected fault") {
			t.Fatalf("a goroutine's panic at %s: exit %d: %s", stage, code, errOut.String())
		}
		des, _ := os.ReadDir(dir)
		if !strings.Contains(strings.Join(names(des), " "), ".ortrain-replaced-") {
			t.Fatalf("a goroutine's panic at %s left %v, without the old run aside (the test kills too late?)", stage, names(des))
		}
		// A refused overwrite opens the directory: the old run comes back
		// first, and stays.
		absent := filepath.Join(root, "absent.safetensors")
		if code, msg := overwrite(`model.init_weights="` + absent + `"`); code != 2 || !strings.Contains(msg, "previous run is put back") {
			t.Errorf("the overwrite after a killed one (at %s): exit %d: %s; want 2, saying the old run is put back", stage, code, msg)
		}
		same("an overwrite killed at " + stage + ", then one refused")
	}

	// Killed again; this time the run is resumed, which puts it back and
	// goes on from its last checkpoint (step 4).
	cmd, errOut := startCLIEnv(t, []string{faultEnv + "=started:goroutine"}, "train", "--config", cfg, "--run-dir", dir, "--overwrite")
	if code := childExit(t, cmd); code != 2 {
		t.Fatalf("a goroutine's panic: exit %d: %s", code, errOut.String())
	}
	code, msg := ortrain("train", "--config", cfg, "--resume", dir, "--set", "trainer.max_steps=6")
	if code != 0 || !strings.Contains(msg, "previous run is put back") {
		t.Fatalf("resume after a killed overwrite: exit %d: %s", code, msg)
	}
	if st, err := checkpoint.ReadState(filepath.Join(dir, "checkpoints", "last")); err != nil || st.Step != 6 {
		t.Errorf("the resumed run's checkpoint: %+v, %v; want step 6", st, err)
	}
	des, _ := os.ReadDir(dir)
	for _, n := range names(des) {
		if strings.HasPrefix(n, ".ortrain-") {
			t.Errorf("left after the resume: %s", n)
		}
	}
}

// TestOverwriteSecondSignal: a second signal once training started, before
// the new run's first step ended, exits at once (130) and still puts the
// overwritten run back.
func TestOverwriteSecondSignal(t *testing.T) {
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
	mark := filepath.Join(root, "started")
	cmd, errOut := startCLIEnv(t, []string{faultEnv + "=started:wait", faultEnv + "_MARK=" + mark}, "train", "--config", cfg, "--run-dir", dir, "--overwrite")
	waitFor(t, "training to start", func() bool {
		_, err := os.Stat(mark)
		return err == nil
	})
	cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(20 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	if code := childExit(t, cmd); code != 130 || !strings.Contains(errOut.String(), "kept "+dir+" as it was") {
		t.Errorf("SIGINT then SIGTERM before the first step: exit %d; want 130 keeping the old run:\n%s", code, errOut.String())
	}
	after := snapshot(t, dir)
	delete(after, filepath.Join(dir, ".lock"))
	if !maps.Equal(before, after) {
		t.Errorf("a second signal before the first step changed the run:\nbefore %v\nafter  %v", before, after)
	}
}

// startCLIEnv is startCLI with extra environment variables.
func startCLIEnv(t *testing.T, env []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), asCLI+"=1"), env...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &errOut
}

func names(des []os.DirEntry) []string {
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}
