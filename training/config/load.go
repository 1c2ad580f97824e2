package config

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/ortrain/ortrain/training/safefile"
)

// Error is a configuration mistake the user has to fix. Several are joined
// with errors.Join when a file has more than one.
type Error struct {
	Source string // file name, "--set key" or "" for a config built in code
	Line   int    // 1-based line in Source, 0 when unknown
	Key    string // dotted key, e.g. "trainer.max_steps"
	Msg    string
}

// Error formats the error as "config: <source>[:line]: <key>: <message>".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config")
	if e.Source != "" {
		b.WriteString(": ")
		b.WriteString(e.Source)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
	}
	if e.Key != "" && !strings.HasPrefix(e.Source, "--set ") {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *Error) BadInput() bool { return true }

// Load reads a TOML file on top of Default(). It does not Resolve, so
// overrides can still be applied.
func Load(path string) (*Config, error) {
	data, err := safefile.ReadFile(path)
	var nf *safefile.NotFileError
	if errors.As(err, &nf) {
		return nil, &Error{Source: nf.Path, Msg: nf.What()}
	}
	if err != nil {
		return nil, &Error{Source: path, Msg: err.Error()}
	}
	return Parse(data, path)
}

// Parse reads TOML bytes (e.g. an embedded preset) on top of Default();
// source names them in errors.
func Parse(data []byte, source string) (*Config, error) {
	c := Default()
	if err := c.decode(string(data), source); err != nil {
		return nil, err
	}
	return c, nil
}

// Merge reads another TOML document on top of c, as a file layered over a
// preset: keys it names replace those of c.
func (c *Config) Merge(data []byte, source string) error {
	return c.decode(string(data), source)
}

var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// Override applies command-line assignments "key.sub=value". The value is
// read as a TOML value (10, 3e-4, true, [0.9, 0.95], "cuda:0"); a value that
// is not valid TOML, like cuda:0, is taken as a string. Errors name the
// --set key.
func (c *Config) Override(assignments ...string) error {
	for _, a := range assignments {
		key, value, ok := strings.Cut(a, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		src := "--set " + key
		if !ok || !bareKey.MatchString(key) {
			return &Error{Source: "--set " + a, Msg: "want key.sub=value with a dotted key of letters, digits, _ and -"}
		}
		doc := key + " = " + value
		if _, err := toml.Decode(doc, new(map[string]any)); err != nil {
			// Not a TOML value: take the text as a string, so
			// --set trainer.device=cuda:0 works without shell quoting.
			doc = key + " = " + strconv.Quote(value)
		}
		if err := c.decode(doc, src); err != nil {
			return err
		}
	}
	return nil
}

// notBuilt are keys users bring from Lightning that ortrain does not
// have yet, and what happens instead.
var notBuilt = map[string]string{
	"trainer.sync_batchnorm":      "synchronised BatchNorm; each rank normalises with its own batch's statistics, as PyTorch's DDP does by default (remove the key, or convert the model's BatchNorm to GroupNorm)",
	"trainer.max_time":            "a time limit; stop a run with SIGINT/SIGTERM (it checkpoints) and resume it with --resume last",
	"trainer.min_epochs":          "a minimum length against early stopping; raise trainer.early_stopping_patience instead",
	"trainer.min_steps":           "a minimum length against early stopping; raise trainer.early_stopping_patience instead",
	"trainer.fast_dev_run":        "a one-batch smoke run; use ortrain plan --memory --probe 1, or --set trainer.max_steps=1",
	"trainer.overfit_batches":     "training on a fixed few batches",
	"trainer.limit_train_batches": "a cap on an epoch's training batches; trainer.max_steps bounds the run",
}

// lightningNames are PyTorch Lightning's names for what ortrain calls
// otherwise: an unknown key that is one of them says which to write.
var lightningNames = map[string]string{
	"trainer.accelerator":             "trainer.device (cpu, cuda, cuda:N or auto)",
	"trainer.default_root_dir":        "output_dir",
	"seed_everything":                 "seed",
	"trainer.seed":                    "seed (top level)",
	"trainer.check_val_every_n_epoch": "trainer.val_check_interval (1.0 is once an epoch; an integer counts steps)",
	"trainer.every_n_train_steps":     "trainer.checkpoint_every_n_steps",
	"trainer.patience":                "trainer.early_stopping_patience",
	"trainer.min_delta":               "trainer.early_stopping_min_delta",
	"trainer.benchmark":               "runtime.cudnn_conv_algo_search",
	"trainer.resume_from_checkpoint":  "the --resume flag",
	"trainer.ckpt_path":               "the --resume flag",
	"trainer.enable_progress_bar":     "nothing: the bar shows on a terminal, lines in a log",
	"scheduler.eta_min":               "scheduler.min_lr",
	"scheduler.T_max":                 "trainer.max_steps (the schedule spans the run)",
	"optimizer.learning_rate":         "optimizer.lr",
	"data.val_batch_size":             "data.batch_size (validation uses it too)",
}

// decode reads doc into c, records which keys it set and where, and turns
// the toml package's errors into *Error.
func (c *Config) decode(doc, source string) error {
	if c.set == nil {
		c.set = map[string]bool{}
	}
	if c.origin == nil {
		c.origin = map[string]string{}
	}
	md, err := toml.Decode(doc, c)
	if err != nil {
		return tomlError(err, source)
	}
	var errs []error
	for _, k := range md.Undecoded() {
		key := k.String()
		msg := "unknown key"
		if why, ok := notBuilt[key]; ok {
			msg = "not built: " + why
		} else if name, ok := lightningNames[key]; ok {
			msg += "; Lightning's name for " + name
		} else if s := suggest(key); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		errs = append(errs, &Error{Source: source, Key: key, Msg: msg})
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, k := range md.Keys() {
		c.set[k.String()] = true
		c.origin[k.String()] = source
	}
	return nil
}

// decodeErr matches the toml package's type errors, which carry the line and
// key only in their text.
var decodeErr = regexp.MustCompile(`^toml: (?:line (\d+) )?(?:\(last key "([^"]*)"\): )?(.*)$`)

func tomlError(err error, source string) error {
	// --set makes a one-line document: its line number says nothing.
	oneLine := strings.HasPrefix(source, "--set ")
	var pe toml.ParseError
	if errors.As(err, &pe) {
		line := pe.Position.Line
		if oneLine {
			line = 0
		}
		return &Error{Source: source, Line: line, Key: pe.LastKey, Msg: pe.Message}
	}
	m := decodeErr.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{Source: source, Msg: err.Error()}
	}
	line, _ := strconv.Atoi(m[1])
	if oneLine {
		line = 0
	}
	msg := plainTypes(m[3])
	if why, ok := lightningValues[m[2]]; ok && typeMismatch.MatchString(m[3]) {
		msg = why(typeMismatch.FindStringSubmatch(m[3])[1])
	}
	return &Error{Source: source, Line: line, Key: m[2], Msg: msg}
}

// lightningValues explain, by key, a value of Lightning's that ortrain
// reads otherwise (given the TOML type of the value written).
var lightningValues = map[string]func(got string) string{
	"trainer.devices": func(got string) string {
		what := "Lightning's \"auto\" (or another string)"
		if got != "string" {
			what = "a list of GPU indices, as Lightning's devices = [0, 1]"
		}
		return what + ": ortrain takes the number of devices per node, an integer (trainer.devices = 2; leave the key out for one process); " +
			"each rank trains on the GPU of its local rank, so choose the GPUs with CUDA_VISIBLE_DEVICES=0,1"
	},
}

// typeMismatch is how the TOML decoder words a value of the wrong type.
var typeMismatch = regexp.MustCompile(`^incompatible types: TOML value has type (\S+); destination has type (\S+)$`)

// typeWords name the decoder's Go and TOML types as a config's reader
// knows them.
var typeWords = map[string]string{
	"string": "a string", "float64": "a float", "float": "a float", "int64": "an integer", "integer": "an integer",
	"bool": "a boolean", "slice": "a list", "[]interface {}": "a list", "[]any": "a list", "map": "a table", "map[string]interface {}": "a table",
	"map[string]any": "a table", "time.Time": "a date", "datetime": "a date",
}

// valueWords names the type of a decoded TOML value as typeWords does, for
// the messages of UnmarshalTOML methods.
func valueWords(v any) string {
	t := fmt.Sprintf("%T", v)
	return cmp.Or(typeWords[t], t)
}

// plainTypes rewords a type mismatch: "a string where a list is wanted
// (write [0.9, 0.95])"; other messages are kept.
func plainTypes(msg string) string {
	m := typeMismatch.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	got, want := cmp.Or(typeWords[m[1]], m[1]), cmp.Or(typeWords[m[2]], m[2])
	s := fmt.Sprintf("%s where %s is wanted", got, want)
	switch want {
	case "a list":
		s += " (write [0.9, 0.95]: square brackets, commas)"
	case "a float":
		s += " (write the number without quotes: 1e-3)"
	case "an integer":
		s += " (write a whole number without quotes, point or exponent: 1000)"
	}
	return s
}

// knownKeys lists every dotted key of the schema, for suggestions.
var knownKeys = func() []string {
	var keys []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := f.Tag.Get("toml")
			if name == "" {
				continue
			}
			k := prefix + name
			keys = append(keys, k)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(Interval{}) {
				walk(k+".", f.Type)
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
	return keys
}()

// suggest returns the known key closest to a mistyped one, if close enough.
func suggest(key string) string {
	best, bestD := "", 4
	for _, k := range knownKeys {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Encode writes c as TOML; after Resolve this is the complete configuration
// the run used, and reading it back gives the same configuration.
func (c *Config) Encode() ([]byte, error) {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// volatileKeys do not change what is computed, only where and how fast it
// runs or how it is reported; Hash ignores them so a resume may change them.
var volatileKeys = []string{
	"name", "output_dir", "ort_lib",
	"data.train", "data.val", "data.num_workers", "data.prefetch", "data.memory_limit",
	"trainer.device", "trainer.max_epochs", "trainer.max_steps", "trainer.val_check_interval",
	"trainer.limit_val_batches", "trainer.log_every_n_steps", "trainer.checkpoint_every_n_steps",
	"trainer.save_top_k", "trainer.early_stopping_patience",
	"trainer.early_stopping_min_delta", "model.artifacts", "model.onnx",
	// read once, when a new run starts; a resume continues from its checkpoint
	"model.init_weights", "model.init_strict",
	"runtime",
}

// Hash is a stable hex SHA-256 of the settings that change the computation
// (model, data shapes and order, the samples per optimizer step,
// precision, optimizer, schedule, seed).
// Paths, devices, logging, run length and [runtime] are left out: a resumed
// run may move its data, extend max_steps or change GPU. A checkpoint stores
// it so resume can tell a changed configuration; Diff says what changed.
func (c *Config) Hash() (string, error) {
	flat, err := c.flat()
	if err != nil {
		return "", err
	}
	// How a step's samples split into devices, per-device batches and
	// accumulated micro-batches does not change which samples a step
	// takes (ranks interleave each epoch's order) nor its mean gradient:
	// only the samples per optimizer step count, so a checkpoint moves
	// between 1 and N devices at the same global batch.
	for _, k := range []string{"data.batch_size", "trainer.accumulate_grad_batches", "trainer.devices", "trainer.num_nodes"} {
		delete(flat, k)
	}
	flat["global_batch"] = int64(c.EffectiveBatchSize(c.Trainer.WorldSize()))
	keys := make([]string, 0, len(flat))
	for k := range flat {
		if !volatile(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%#v\n", k, flat[k])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func volatile(key string) bool {
	for _, v := range volatileKeys {
		if key == v || strings.HasPrefix(key, v+".") {
			return true
		}
	}
	return false
}

// Diff lists the dotted keys whose values differ between a and b, sorted,
// with volatile ones (that Hash ignores) marked "(volatile)".
func Diff(a, b *Config) ([]string, error) {
	fa, err := a.flat()
	if err != nil {
		return nil, err
	}
	fb, err := b.flat()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range []map[string]any{fa, fb} {
		for k := range f {
			if seen[k] {
				continue
			}
			seen[k] = true
			if !reflect.DeepEqual(fa[k], fb[k]) {
				if volatile(k) {
					k += " (volatile)"
				}
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Value is the value of a dotted key as Encode writes it (nil when c
// writes none), for messages about a key Diff names.
func (c *Config) Value(key string) any {
	f, err := c.flat()
	if err != nil {
		return nil
	}
	return f[key]
}

// flat encodes c and reads it back as dotted key → TOML value, so
// comparisons see exactly what Encode writes.
func (c *Config) flat() (map[string]any, error) {
	data, err := c.Encode()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if _, err := toml.Decode(string(data), &m); err != nil {
		return nil, err
	}
	out := map[string]any{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			out[prefix+k] = v
		}
	}
	walk("", m)
	return out, nil
}

// EffectiveBatchSize is the number of samples per optimizer step:
// batch_size × accumulate_grad_batches × worldSize.
func (c *Config) EffectiveBatchSize(worldSize int) int {
	return c.Data.BatchSize * c.Trainer.AccumulateGradBatches * max(worldSize, 1)
}

// PeakLR is optimizer.lr scaled by trainer.lr_scaling from base_batch_size
// to the effective batch size on worldSize devices.
func (c *Config) PeakLR(worldSize int) float64 {
	return ScaleLR(c.Optimizer.LR, c.EffectiveBatchSize(worldSize), c.Trainer.BaseBatchSize, c.Trainer.LRScaling)
}

// ScaleLR scales a learning rate tuned at batch base to batch: "linear"
// multiplies by batch/base, "sqrt" by √(batch/base); "none", "" or base ≤ 0
// leave it unchanged.
func ScaleLR(lr float64, batch, base int, rule string) float64 {
	if base <= 0 {
		return lr
	}
	r := float64(batch) / float64(base)
	switch rule {
	case "linear":
		return lr * r
	case "sqrt":
		return lr * math.Sqrt(r)
	}
	return lr
}
