package rundir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/ortrain/ortrain/training/checkpoint"
)

var versionName = regexp.MustCompile(`^version_(\d+)$`)

// FindCheckpoint resolves what a user names as a checkpoint — "last" (the
// newest whole checkpoint of the newest version of run name under
// outputDir), "best" (that version's best checkpoint by trainer.monitor), a
// checkpoint directory, or a version directory (its newest whole
// checkpoint) — to the checkpoint directory and the version directory it
// belongs to. flag names the option in errors (--resume, --checkpoint).
func FindCheckpoint(flag, spec, outputDir, name string) (ck, version string, err error) {
	return findCheckpoint(flag, spec, spec, outputDir, name)
}

// findCheckpoint is FindCheckpoint; said is what the user gave (best,
// when it looks for the last run of the name first).
func findCheckpoint(flag, spec, said, outputDir, name string) (ck, version string, err error) {
	bad := func(format string, args ...any) error {
		return &Error{Path: spec, Msg: fmt.Sprintf(format, args...)}
	}
	if (spec == "best" || spec == "last") && name == "" {
		return "", "", &FlagError{Flag: flag + " " + spec, Msg: "picks from the runs of the configuration's name: give --config (or --preset), or name the run's directory (outputs/NAME/version_N) or a checkpoint directory"}
	}
	if spec == "best" {
		if _, version, err = findCheckpoint(flag, "last", spec, outputDir, name); err != nil {
			return "", "", err
		}
		dir := filepath.Join(version, CheckpointsDir)
		if ck, err = checkpoint.Best(dir); errors.Is(err, checkpoint.ErrUnranked) {
			return "", "", &Error{Path: dir, Msg: flag + " best: " + checkpoint.ErrUnranked.Error() + "; use last or name a checkpoint"}
		}
		return ck, version, err
	}
	switch {
	case spec == "last":
		root := filepath.Join(outputDir, name)
		des, err := os.ReadDir(root)
		if err != nil {
			return "", "", &Error{Path: root, Msg: flag + " " + said + ": no earlier run named " + name}
		}
		best := -1
		for _, de := range des {
			if m := versionName.FindStringSubmatch(de.Name()); m != nil {
				n, _ := strconv.Atoi(m[1])
				v := filepath.Join(root, de.Name())
				if _, err := checkpoint.Latest(filepath.Join(v, CheckpointsDir)); err == nil && n > best {
					best, version = n, v
				}
			}
		}
		if best < 0 {
			return "", "", &Error{Path: root, Msg: flag + " " + said + ": no version holds a whole checkpoint"}
		}
	case exists(filepath.Join(spec, checkpoint.StateFile)):
		real, err := filepath.EvalSymlinks(spec)
		if err != nil {
			return "", "", err
		}
		return real, filepath.Dir(filepath.Dir(real)), nil
	case exists(filepath.Join(spec, CheckpointsDir)):
		version = spec
	case filepath.Base(filepath.Clean(spec)) == CheckpointsDir && exists(spec):
		version = filepath.Dir(filepath.Clean(spec)) // a run's checkpoints directory
	case !exists(spec):
		return "", "", bad("does not exist; %s takes last, best, a checkpoint directory (with %s) or a run's version directory (with %s/)", flag, checkpoint.StateFile, CheckpointsDir)
	default:
		return "", "", bad("%s takes last, a checkpoint directory (with %s) or a run's version directory (with %s/)", flag, checkpoint.StateFile, CheckpointsDir)
	}
	ck, err = checkpoint.Latest(filepath.Join(version, CheckpointsDir))
	if errors.Is(err, checkpoint.ErrNone) {
		return "", "", bad("no whole checkpoint in %s", filepath.Join(version, CheckpointsDir))
	}
	return ck, version, err
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
