package checkpoint

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ortrain/ortrain/training/safetensors"
)

// LastLink is the symbolic link in a checkpoints directory that points at
// the newest checkpoint, like Lightning's last.ckpt.
const LastLink = "last"

// BestLink points at the best checkpoint by the monitored metric (runs
// with trainer.monitor that keep more than the newest), like Lightning's
// best_model_path.
const BestLink = "best"

// ErrNone is returned by Latest when a directory holds no whole checkpoint.
var ErrNone = errors.New("no checkpoint")

// Entry is a whole checkpoint found in a checkpoints directory.
type Entry struct {
	Dir   string
	Step  int64
	Score *float64 // the monitored metric, nil when not measured
	Time  time.Time
}

// scan lists the whole checkpoints in dir: subdirectories whose state.json
// reads and whose tensor file has a consistent header and size. Temporary
// and trash directories, the last and best links and anything else are
// skipped; so is a real directory named last or best that is a copy of a
// checkpoint there (a run folder copied without its links: cp -rL, scp -r,
// zip), while one that is no copy is a checkpoint like the others.
func scan(dir string) ([]Entry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out, links []Entry
	for _, de := range des {
		name := de.Name()
		if !de.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(dir, name)
		st, err := readState(p)
		if err != nil {
			continue
		}
		sf, err := safetensors.Open(filepath.Join(p, TensorsFile))
		if err != nil {
			continue
		}
		sf.Close()
		e := Entry{Dir: p, Step: st.Step, Score: st.Score, Time: st.Time}
		if name == LastLink || name == BestLink {
			links = append(links, e)
			continue
		}
		out = append(out, e)
	}
	for _, l := range links {
		if !slices.ContainsFunc(out, func(e Entry) bool { return sameSave(e, l) }) {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return newer(out[j], out[i]) })
	return out, nil
}

// sameSave reports whether two entries are copies of one save.
func sameSave(a, b Entry) bool { return a.Step == b.Step && a.Time.Equal(b.Time) }

// newer orders checkpoints by step, then by save time.
func newer(a, b Entry) bool {
	if a.Step != b.Step {
		return a.Step > b.Step
	}
	return a.Time.After(b.Time)
}

// Latest returns the checkpoint "last" points at in dir (a run's
// checkpoints directory) when it is whole, else the newest whole one, or
// ErrNone. After a resume from an older checkpoint "last" is the resumed
// branch's newest, not the abandoned branch's. A whole checkpoint of a
// later step saved after the one "last" points at is taken instead: a
// process killed between a save and the link's update left it so.
// Directories left by an interrupted save or delete are ignored; Manager
// removes them when it takes over the directory.
func Latest(dir string) (string, error) {
	es, err := scan(dir)
	if err != nil {
		return "", err
	}
	if len(es) == 0 {
		return "", fmt.Errorf("%s: %w", dir, ErrNone)
	}
	if target, err := os.Readlink(filepath.Join(dir, LastLink)); err == nil {
		if i := slices.IndexFunc(es, func(e Entry) bool { return filepath.Base(e.Dir) == filepath.Base(target) }); i >= 0 {
			last := es[i]
			for _, e := range es {
				if e.Step > es[i].Step && e.Time.After(last.Time) {
					last = e
				}
			}
			return last.Dir, nil
		}
	}
	return es[len(es)-1].Dir, nil
}

// ErrUnranked is returned by Best when no checkpoint carries a score.
var ErrUnranked = errors.New("no checkpoint carries a monitored score (the run sets no trainer.monitor, or saved none after a validation)")

// Best returns the checkpoint the "best" link in dir points at, or, where
// there is none (runs from before the link), the best whole checkpoint by
// the score each was saved with, ranked the way the newest scored one says
// (its Mode); ties go to the newer.
func Best(dir string) (string, error) {
	es, err := scan(dir)
	if err != nil {
		return "", err
	}
	if target, err := os.Readlink(filepath.Join(dir, BestLink)); err == nil {
		for _, e := range es {
			if filepath.Base(e.Dir) == filepath.Base(target) {
				return e.Dir, nil
			}
		}
	}
	mode := ""
	var scored []Entry
	for _, e := range es {
		if e.Score == nil {
			continue
		}
		st, err := readState(e.Dir)
		if err != nil || st.Mode == "" {
			continue
		}
		scored, mode = append(scored, e), st.Mode
	}
	if len(scored) == 0 {
		return "", fmt.Errorf("%s: %w", dir, ErrUnranked)
	}
	m := &Manager{monitor: "ranked", mode: mode, entries: scored}
	return m.ranked()[0].Dir, nil
}

// Manager saves checkpoints into one directory, keeping the newest one
// (linked as "last") and the top K by a monitored metric, and deleting the
// others only after a new checkpoint is safely in place. One trainer owns a
// directory; Manager is not safe for concurrent use.
type Manager struct {
	dir     string
	topK    int
	monitor string
	mode    string
	entries []Entry // oldest first
}

// NewManager takes over a checkpoints directory: it creates it if needed,
// removes what an interrupted save or delete left behind, lists the
// checkpoints already there (on resume) and prunes them to the newest plus
// the top K. topK is Lightning's save_top_k:
// -1 keeps all, 0 only the newest; monitor and mode ("min" or "max") rank
// them, and with monitor empty the newest K are kept.
func NewManager(dir string, topK int, monitor, mode string) (*Manager, error) {
	if monitor != "" && mode != "min" && mode != "max" {
		return nil, fmt.Errorf("checkpoint: mode %q is not min or max", mode)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		if n := de.Name(); strings.HasPrefix(n, tmpPrefix) || strings.HasPrefix(n, trashPrefix) {
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				return nil, err
			}
		}
	}
	es, err := scan(dir)
	if err != nil {
		return nil, err
	}
	// Nothing is pruned before the next save: a run that is refused or
	// fails before it saves leaves every checkpoint where it was (one too
	// many after a crash between a save and its pruning goes then).
	return &Manager{dir: dir, topK: topK, monitor: monitor, mode: mode, entries: es}, nil
}

// Resume sets aside the checkpoints after step, the run resuming from a
// checkpoint at step: they belong to the branch it abandons, stay on disk
// untouched, and are neither "last" nor ranked nor pruned by this run.
// It returns them.
func (m *Manager) Resume(step int64) []Entry {
	var kept, aside []Entry
	for _, e := range m.entries {
		if e.Step > step {
			aside = append(aside, e)
		} else {
			kept = append(kept, e)
		}
	}
	m.entries = kept
	return aside
}

// Dir is the checkpoints directory.
func (m *Manager) Dir() string { return m.dir }

// Entries lists the checkpoints kept, oldest first.
func (m *Manager) Entries() []Entry { return append([]Entry(nil), m.entries...) }

// Save writes a checkpoint named step-NNNNNNNNN (with a suffix if that
// step was saved before), points "last" at it and then deletes those that
// fell out of the top K. It returns the new checkpoint's directory.
func (m *Manager) Save(st *State, tensors []Tensor) (string, error) {
	path := m.freeName(fmt.Sprintf("step-%09d", st.Step))
	if st.Score != nil {
		st.Monitor, st.Mode = m.monitor, m.mode
	}
	if err := Save(path, st, tensors); err != nil {
		return "", err
	}
	m.entries = append(m.entries, Entry{Dir: path, Step: st.Step, Score: st.Score, Time: st.Time})
	if err := m.link(LastLink, filepath.Base(path)); err != nil {
		return path, err
	}
	if err := m.prune(); err != nil {
		return path, err
	}
	return path, m.linkBest()
}

// linkBest points "best" at the top-ranked scored checkpoint; without a
// monitor, a score, or with only the newest kept, there is no best link.
func (m *Manager) linkBest() error {
	if m.monitor == "" || m.topK == 0 {
		return nil
	}
	if r := m.ranked(); len(r) > 0 && r[0].Score != nil {
		return m.link(BestLink, filepath.Base(r[0].Dir))
	}
	return nil
}

// link points the symlink link ("last", "best") at name by renaming a new
// symlink over it, so the link always exists once it first did. A real
// directory in the link's place (a run folder copied without its links)
// is replaced too: when it is a copy of a checkpoint kept under its own
// name, it is renamed aside and removed once the link is in; else it is
// renamed to a step name of its own, and nothing is lost.
func (m *Manager) link(link, name string) error {
	path := filepath.Join(m.dir, link)
	aside := ""
	if st, err := os.Lstat(path); err == nil && st.IsDir() {
		if m.isCopy(path) {
			aside = filepath.Join(m.dir, trashPrefix+link+"-"+randomSuffix())
			if err := os.Rename(path, aside); err != nil {
				return err
			}
		} else {
			// No copy (or not whole): it keeps its contents under a
			// name of its own.
			keep := link + "-kept"
			if st, err := readState(path); err == nil {
				keep = fmt.Sprintf("step-%09d", st.Step)
			}
			to := m.freeName(keep)
			if err := os.Rename(path, to); err != nil {
				return err
			}
			for i := range m.entries {
				if m.entries[i].Dir == path {
					m.entries[i].Dir = to
				}
			}
			if name == link {
				name = filepath.Base(to)
			}
		}
	}
	tmp := filepath.Join(m.dir, tmpPrefix+link+"-"+randomSuffix())
	if err := os.Symlink(name, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		if aside != "" {
			os.Rename(aside, path)
		}
		return err
	}
	if err := syncDir(m.dir); err != nil {
		return err
	}
	if aside != "" {
		return os.RemoveAll(aside)
	}
	return nil
}

// isCopy reports whether the directory path is a whole copy of another
// checkpoint in m.dir, saved at the same step and time.
func (m *Manager) isCopy(path string) bool {
	st, err := readState(path)
	if err != nil {
		return false
	}
	es, err := scan(m.dir)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(es, func(e Entry) bool {
		return e.Dir != path && e.Step == st.Step && e.Time.Equal(st.Time)
	})
}

// freeName is m.dir/name, or with the first free suffix -2, -3, ...
func (m *Manager) freeName(name string) string {
	path := filepath.Join(m.dir, name)
	for i := 2; ; i++ {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return path
		}
		path = filepath.Join(m.dir, fmt.Sprintf("%s-%d", name, i))
	}
}

// better reports whether score a ranks above score b; a missing or NaN
// score ranks below every number.
func (m *Manager) better(a, b *float64) bool {
	va, vb := scoreValue(a), scoreValue(b)
	if math.IsNaN(vb) {
		return !math.IsNaN(va)
	}
	if math.IsNaN(va) {
		return false
	}
	if m.mode == "max" {
		return va > vb
	}
	return va < vb
}

func scoreValue(s *float64) float64 {
	if s == nil {
		return math.NaN()
	}
	return *s
}

// Best returns the best checkpoint by the monitored metric (the newest when
// nothing is monitored); false when there is none.
func (m *Manager) Best() (Entry, bool) {
	r := m.ranked()
	if len(r) == 0 {
		return Entry{}, false
	}
	return r[0], true
}

// ranked orders the entries best first; ties and unmonitored runs go by
// recency.
func (m *Manager) ranked() []Entry {
	r := append([]Entry(nil), m.entries...)
	sort.SliceStable(r, func(i, j int) bool {
		if m.monitor != "" {
			if m.better(r[i].Score, r[j].Score) {
				return true
			}
			if m.better(r[j].Score, r[i].Score) {
				return false
			}
		}
		return newer(r[i], r[j])
	})
	return r
}

// prune deletes checkpoints that are neither the newest nor in the top K.
// Each is first renamed to a trash name, so a crash during the deletion
// never leaves a partial directory that looks like a checkpoint.
func (m *Manager) prune() error {
	if m.topK < 0 || len(m.entries) == 0 {
		return nil
	}
	keep := map[string]bool{m.entries[len(m.entries)-1].Dir: true}
	for i, e := range m.ranked() {
		if i < m.topK {
			keep[e.Dir] = true
		}
	}
	var kept []Entry
	var errs []error
	for _, e := range m.entries {
		if keep[e.Dir] {
			kept = append(kept, e)
			continue
		}
		trash := filepath.Join(m.dir, trashPrefix+filepath.Base(e.Dir)+"-"+randomSuffix())
		if err := os.Rename(e.Dir, trash); err != nil {
			errs = append(errs, err)
			kept = append(kept, e)
			continue
		}
		if err := os.RemoveAll(trash); err != nil {
			errs = append(errs, err)
		}
	}
	m.entries = kept
	return errors.Join(errs...)
}
