//go:build unix

package tokens

import (
	"testing"

	"github.com/ortrain/ortrain/training/safefile/fifotest"
)

// TestNamedPipeRefused: a GSM8K file of each form that is a named pipe
// is refused at once.
func TestNamedPipeRefused(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"train.jsonl", "train.json", "train.parquet"} {
		p := fifotest.Make(t, dir, name)
		fifotest.Refused(t, p, func() error { _, _, err := ReadGSM8K(p, false); return err })
	}
}
