package collective

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWatchdog: a collective waiting past the timeout is reported once,
// naming the rank, the collective and the timeout; collectives that end
// in time, and the time between them, are not.
func TestWatchdog(t *testing.T) {
	c := &Comm{rank: 3, size: 4}
	fired := make(chan error, 2)
	c.Watch(200*time.Millisecond, func(err error) { fired <- err })
	for range 5 { // quick collectives, and idle time between them
		c.watch.begin(opSumFloat64, 5)
		time.Sleep(50 * time.Millisecond)
		c.watch.end()
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case err := <-fired:
		t.Fatalf("fired without a stuck collective: %v", err)
	default:
	}
	c.watch.begin(opSumFloat32, 1024)
	select {
	case err := <-fired:
		var te *TimeoutError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "rank 3: no rank answered within the collective timeout of 200ms (MPI_Allreduce of 1024 floats)") {
			t.Errorf("timeout reported as %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a collective stuck for 5 s was not reported")
	}
	t.Setenv(TimeoutEnv, "soon")
	if _, err := TimeoutFromEnv(); err == nil || !strings.Contains(err.Error(), TimeoutEnv) {
		t.Errorf("%s=soon: %v", TimeoutEnv, err)
	}
	t.Setenv(TimeoutEnv, "")
	if d, err := TimeoutFromEnv(); d != DefaultTimeout || err != nil {
		t.Errorf("unset: %v, %v; want %v", d, err, DefaultTimeout)
	}
}
