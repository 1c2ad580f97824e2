package collective

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// TimeoutEnv sets the collective timeout in seconds (0 turns the watchdog
// off); DefaultTimeout applies where it is unset, as PyTorch's
// process-group timeout (Lightning's DDPStrategy(timeout=...)).
const (
	TimeoutEnv     = "ORTRAIN_COLLECTIVE_TIMEOUT"
	DefaultTimeout = 30 * time.Minute
)

// TimeoutError is a collective no other rank joined within the timeout:
// one stopped answering (hung, stopped with SIGSTOP, stuck in I/O, or
// still busy, as rank 0 writing a very large checkpoint to slow storage).
type TimeoutError struct {
	Rank    int
	Op      string
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("rank %d: no rank answered within the collective timeout of %v (%s): a rank stopped answering (hung, stopped, or stuck in I/O); ending the job. "+
		"Raise %s (seconds) if a rank is only slow, as when writing a large checkpoint", e.Rank, e.Timeout, e.Op, TimeoutEnv)
}

// TimeoutFromEnv is the timeout TimeoutEnv sets, DefaultTimeout where it
// is unset; an unreadable value is an error naming it.
func TimeoutFromEnv() (time.Duration, error) {
	v := os.Getenv(TimeoutEnv)
	if v == "" {
		return DefaultTimeout, nil
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || s < 0 || s > 1e9 {
		return 0, &Error{fmt.Sprintf("%s=%q: want a number of seconds ≥ 0 (0: no timeout)", TimeoutEnv, v)}
	}
	return time.Duration(s * float64(time.Second)), nil
}

// watch is the state of a Comm's watchdog: when the collective in flight
// began (0: none), which it is and its size; atomics, so that a step's
// collectives allocate nothing.
type watch struct {
	since atomic.Int64 // unix nanoseconds
	op    atomic.Int32
	n     atomic.Int64
}

// The collectives a watch names.
const (
	opSumFloat32 = iota
	opSumFloat64
	opBroadcast
	opNCCLSum
)

var opNames = []string{
	opSumFloat32: "MPI_Allreduce of %d floats",
	opSumFloat64: "MPI_Allreduce of %d doubles",
	opBroadcast:  "MPI_Bcast of %d bytes",
	opNCCLSum:    "ncclAllReduce of %d gradients",
}

func (w *watch) begin(op int, n int) {
	w.op.Store(int32(op))
	w.n.Store(int64(n))
	w.since.Store(time.Now().UnixNano())
}

func (w *watch) end() { w.since.Store(0) }

// Watch starts a watchdog over c's collectives (and those of a
// DeviceComm on it): when one has waited longer than timeout for the
// other ranks, expired is called once with a *TimeoutError, from the
// watchdog's goroutine, while the collective still blocks; it should end
// the process (the collective cannot be cancelled). A timeout ≤ 0 watches
// nothing.
func (c *Comm) Watch(timeout time.Duration, expired func(error)) {
	if timeout <= 0 {
		return
	}
	tick := min(max(timeout/10, 10*time.Millisecond), time.Second)
	go func() {
		last, resumed := time.Now(), time.Time{}
		for now := range time.Tick(tick) {
			if now.Sub(last) > 3*tick+time.Second {
				// This process itself was not running (stopped, or the
				// machine suspended): its own wait counts from now.
				resumed = now
			}
			last = now
			since := c.watch.since.Load()
			if since == 0 {
				continue
			}
			if began := time.Unix(0, since); now.Sub(began) < timeout || now.Sub(resumed) < timeout {
				continue
			}
			op := fmt.Sprintf(opNames[c.watch.op.Load()], c.watch.n.Load())
			expired(&TimeoutError{Rank: c.rank, Op: op, Timeout: timeout})
			return
		}
	}()
}
