// Package logging records training metrics: metrics.csv, TensorBoard event
// files, and a progress display (a redrawn bar on a terminal, plain lines
// otherwise).
package logging

import (
	"errors"
	"sort"
)

// Logger receives metric values by optimizer step.
type Logger interface {
	// Log records metrics at step. Names use "/" to group ("train/loss").
	Log(step int64, metrics map[string]float64) error
	// Close flushes and closes the logger.
	Close() error
}

// Multi fans each call out to every logger, continuing past failures and
// returning them joined.
func Multi(loggers ...Logger) Logger { return multi(loggers) }

type multi []Logger

// Log logs to every logger.
func (m multi) Log(step int64, metrics map[string]float64) error {
	var errs []error
	for _, l := range m {
		errs = append(errs, l.Log(step, metrics))
	}
	return errors.Join(errs...)
}

// Close closes every logger.
func (m multi) Close() error {
	var errs []error
	for _, l := range m {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// sortedKeys gives metrics in a stable order, so files are reproducible.
func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
