package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// repeatWindow is how soon after the first SIGINT/SIGTERM the same signal
// again counts as the first one delivered twice, not as a second: GNU
// timeout signals the process and then its whole group (so the process
// gets its SIGTERM twice, microseconds apart), and launchers forward a
// signal to every process they started.
const repeatWindow = 1500 * time.Millisecond

// firstSignal tells a deliberate second signal from the first one
// delivered again.
type firstSignal struct {
	sig os.Signal
	at  time.Time
}

// again records the first signal (false), then reports whether sig is a
// second one: another kind of signal, or the same after repeatWindow.
func (f *firstSignal) again(sig os.Signal) bool {
	if f.sig == nil {
		f.sig, f.at = sig, time.Now()
		return false
	}
	return sig != f.sig || time.Since(f.at) >= repeatWindow
}

// signals handles SIGINT and SIGTERM for a training command. During setup
// (artifacts, data, sessions: minutes for large models) a signal ends the
// command at once with exit 130, after undoing what setup made (a new
// version directory, an overwritten run directory's old contents). Once
// training started, the first cancels ctx, which lets the loop finish its
// micro-batch and checkpoint (a step of several is dropped and redone on
// resume), and a second (see firstSignal) exits at once with
// 130 (the newest checkpoint stays whole).
type signals struct {
	ctx    context.Context
	cancel context.CancelFunc
	w      io.Writer
	ch     chan os.Signal
	quit   chan struct{}

	mu      sync.Mutex
	started bool
	undo    func() string // undoes setup, saying what it did
	// abandon, on an exit once training started, puts back an
	// overwritten run directory's previous run if the new run has not
	// taken a step yet, saying what it did ("" for nothing).
	abandon func() string
}

// watchSignals starts handling SIGINT and SIGTERM, in setup mode.
func watchSignals(w io.Writer) *signals {
	ctx, cancel := context.WithCancel(context.Background())
	s := &signals{ctx: ctx, cancel: cancel, w: w, ch: make(chan os.Signal, 4), quit: make(chan struct{})}
	watchStopFile(cancel, s.quit)
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM)
	go s.loop()
	return s
}

func (s *signals) loop() {
	var first firstSignal
	announced := false
	for sig := range s.ch {
		s.mu.Lock()
		if !s.started {
			msg := "nothing was written"
			if s.undo != nil {
				msg = s.undo()
			}
			if msg != "" {
				msg = "; " + msg
			}
			fmt.Fprintf(s.w, "\nortrain: interrupted before training started%s\n", msg)
			os.Exit(130) // holding mu: setup does not start training meanwhile
		}
		s.mu.Unlock()
		if !first.again(sig) {
			if !announced { // (the first signal, not a copy of it)
				announced = true
				fmt.Fprintln(s.w, "\nortrain: interrupted; finishing the micro-batch and writing a checkpoint (again to exit now)")
			}
			s.cancel()
			continue
		}
		msg := "exiting without a new checkpoint"
		if s.abandon != nil {
			if undone := s.abandon(); undone != "" {
				msg += " before the new run's first step; " + undone
			}
		}
		fmt.Fprintln(s.w, "ortrain: "+msg)
		os.Exit(130)
	}
}

// creating runs create, which makes what setup must undo (the run
// directory) and returns its undo, with signals held back until that undo
// is registered: a signal between the directory's creation and its undo
// would otherwise end setup saying nothing was written and leave the
// directory.
func (s *signals) creating(create func() (undo func() string, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	undo, err := create()
	if err == nil {
		s.undo = undo
	}
	return err
}

// setAbandon registers what a second signal does before it exits.
func (s *signals) setAbandon(abandon func() string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abandon = abandon
}

// start ends setup mode: signals now interrupt training. (It waits for a
// signal that is ending setup, which then exits.)
func (s *signals) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
}

// stop stops handling the signals.
func (s *signals) stop() {
	signal.Stop(s.ch)
	close(s.ch)
	close(s.quit)
	s.cancel()
}
