package trainer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/callback"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/rundir"
)

// childEnv makes the test binary a training process (see childMain); its
// value is the run directory.
const childEnv = "ORTRAIN_TRAINER_CHILD"

// stepPrinter reports each finished step on stdout, after the
// checkpointer before it in the list has saved it.
type stepPrinter struct{}

func (stepPrinter) OnTrainStart(*callback.State) error { return nil }
func (stepPrinter) OnStepEnd(s *callback.State, _ callback.StepResult) error {
	_, err := fmt.Printf("step %d\n", s.Step)
	return err
}
func (stepPrinter) OnValidationEnd(*callback.State, map[string]float64) error { return nil }
func (stepPrinter) OnTrainEnd(*callback.State) error                          { return nil }

// childMain trains the test MLP in the run directory $ORTRAIN_TRAINER_CHILD,
// checkpointing every step and resuming from the latest checkpoint there.
func childMain() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	if err := ort.Init(os.Getenv(ort.LibraryEnv)); err != nil {
		return fail(err)
	}
	dir := os.Getenv(childEnv)
	c, err := config.Parse([]byte(baseTOML), "test.toml")
	if err != nil {
		return fail(err)
	}
	if err := c.Override("model.artifacts=\""+os.Getenv("ORTRAIN_TRAINER_ART")+"\"", "trainer.max_steps=400", "trainer.checkpoint_every_n_steps=1"); err != nil {
		return fail(err)
	}
	if err := c.Resolve(); err != nil {
		return fail(err)
	}
	rd, err := rundir.Resume(dir)
	if err != nil {
		return fail(err)
	}
	resume, err := checkpoint.Latest(rd.Checkpoints())
	if errors.Is(err, checkpoint.ErrNone) {
		resume = ""
	} else if err != nil {
		return fail(err)
	}
	opts, _ := c.SessionOptions(false)
	tr, err := New(Options{Config: c, Artifacts: c.Model.Artifacts, Session: opts, Train: newBlobs(96, 1), Val: newBlobs(40, 2),
		Dir: rd, Resume: resume, Callbacks: []callback.Callback{stepPrinter{}}})
	if err != nil {
		return fail(err)
	}
	if err := tr.Run(context.Background()); err != nil {
		return fail(err)
	}
	return 0
}

// TestSIGKILLAnyMoment kills a training process with SIGKILL at 20 random
// moments and restarts it each time from checkpoints/latest. Every time the
// newest checkpoint loads (checksum included) and is at or after the last
// step the process reported as saved; the run then finishes at step 400.
func TestSIGKILLAnyMoment(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 21 processes")
	}
	art := mlpArtifacts(t)
	rd, err := rundir.New(filepath.Join(t.TempDir(), "outputs"), "mlp")
	if err != nil {
		t.Fatal(err)
	}
	dir := rd.Path
	rd.Close()
	r := rand.New(rand.NewPCG(9, 9))
	saved := int64(0)
	start := func() (*exec.Cmd, *bufio.Scanner) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+dir, "ORTRAIN_TRAINER_ART="+art, ort.LibraryEnv+"="+ort.LibraryPath())
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, bufio.NewScanner(out)
	}
	for kill := 0; kill < 20; kill++ {
		cmd, sc := start()
		// Kill after the child reports a random number of steps (0-7), then
		// a random delay inside the next step or checkpoint write.
		steps := r.IntN(8)
		for i := 0; i < steps && sc.Scan(); i++ {
			if n, err := strconv.ParseInt(strings.TrimPrefix(sc.Text(), "step "), 10, 64); err == nil {
				saved = n
			}
		}
		time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() { // steps reported before the kill landed
			if n, err := strconv.ParseInt(strings.TrimPrefix(sc.Text(), "step "), 10, 64); err == nil {
				saved = n
			}
		}
		cmd.Wait()
		latest, err := checkpoint.Latest(filepath.Join(dir, "checkpoints"))
		if saved == 0 && errors.Is(err, checkpoint.ErrNone) {
			continue
		}
		if err != nil {
			t.Fatalf("kill %d: %v", kill, err)
		}
		ck, err := checkpoint.Load(latest)
		if err != nil {
			t.Fatalf("kill %d: newest checkpoint unusable: %v", kill, err)
		}
		if ck.State.Step < saved {
			t.Errorf("kill %d: newest checkpoint at step %d, but step %d was reported saved", kill, ck.State.Step, saved)
		}
		ck.Close()
		t.Logf("kill %d after step %d: resuming from %s", kill, saved, filepath.Base(latest))
	}
	cmd, sc := start()
	for sc.Scan() {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("final run: %v", err)
	}
	latest, err := checkpoint.Latest(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Load(latest)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.State.Step != 400 {
		t.Errorf("finished at step %d, want 400", ck.State.Step)
	}
}
