package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ortrain/ortrain/internal/fuzzguard"
)

// FuzzParseResolve feeds arbitrary TOML, seeded with the presets of
// configs/ and configurations with absurd sizes and non-finite numbers,
// to Parse and Resolve. Neither may panic or allocate more than 64 MiB
// plus 100 times the input; Parse's errors are *Errors naming the file;
// and a configuration Resolve accepts must Encode into TOML that reads
// back, resolves, and hashes the same.
func FuzzParseResolve(f *testing.F) {
	presets, err := filepath.Glob(filepath.Join("..", "..", "configs", "*.toml"))
	if err != nil || len(presets) == 0 {
		f.Fatalf("no presets in configs/: %v", err)
	}
	for _, p := range presets {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A valid configuration with more [data] keys.
	data := func(keys string) string {
		return "name = \"tiny\"\n[model]\nrecipe = \"resnet\"\n[data]\nkind = \"synthetic\"\n" + keys + "\n[trainer]\nmax_steps = 100\n"
	}
	for _, s := range []string{
		minimal,
		data("batch_size = 1000000000"),
		data("batch_size = 9223372036854775807\nprefetch = 9223372036854775807\nnum_workers = 9223372036854775807"),
		data("memory_limit = \"8388608TiB\""),
		data("memory_limit = \"9.3e18B\""),
		data("memory_limit = 9223372036854775807"),
		data("[data.volumes]\npatch_size = [65535, 65535, 65535]"),
		"[model]\nrecipe = \"vqgan3d\"\n[model.params]\ncodebook_size = 1e12\npatch_size = [65535, 65535, 65535]\n" +
			"[data]\nkind = \"volumes\"\ntrain = \"x\"\nbatch_size = 1_000_000_000\nprefetch = 9223372036854775807\n" +
			"[data.volumes]\npatch_size = [65535, 65535, 65535]\nstride = [1, 1, 1]\n[trainer]\nmax_steps = 9223372036854775807\n",
		"[data]\nkind = \"tokens\"\nmemory_limit = \"8EiB\"\n[data.tokens]\nseq_len = 9223372036854775807\nblock_size = -1\nsegments = [9223372036854775807, 9223372036854775807, 2]\n",
		"[data]\nmemory_limit = \"8192PB\"\n[runtime]\ngpu_mem_limit = \"9223372036854775807\"\n",
		"[data]\nmemory_limit = \"8388608TiB\"\n",
		"[optimizer]\nlr = nan\nbetas = [inf, -inf]\neps = -nan\n[trainer]\ngradient_clip_val = inf\nval_check_interval = nan\n",
		"[trainer]\nval_check_interval = 0\nprecision = 16\n[model.input_shapes]\nx = [-2, 0, 9223372036854775807]\n",
		"[model.params]\na = [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]\nb = {c = {d = {e = nan}}}\n",
		"a = [1, 2\n",
		"[data]\nkind = 1\n",
		"[data.volumes]\npatch_size = []\nstride = []\n",
	} {
		f.Add([]byte(s))
	}
	const path = "fuzz.toml"
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzzguard.Watchdog(10 * time.Second)()
		before := fuzzguard.Allocated()
		c, err := Parse(b, path)
		if err == nil {
			err = c.Resolve()
			if err == nil {
				roundTrip(t, c)
			}
		} else if !namesSource(err, path) {
			t.Errorf("Parse error is not a config.Error naming %s: %v", path, err)
		}
		if used, budget := fuzzguard.Allocated()-before, uint64(64<<20+100*len(b)); used > budget {
			t.Errorf("parsing %d bytes allocated %d bytes (budget %d)", len(b), used, budget)
		}
	})
}

// namesSource reports whether err is one or more *Errors, all from source.
func namesSource(err error, source string) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !namesSource(e, source) {
				return false
			}
		}
		return len(j.Unwrap()) > 0
	}
	var ce *Error
	return errors.As(err, &ce) && ce.Source == source
}

// roundTrip checks that a resolved configuration reads back as itself.
func roundTrip(t *testing.T, c *Config) {
	enc, err := c.Encode()
	if err != nil {
		t.Fatalf("a resolved configuration does not encode: %v", err)
	}
	back, err := Parse(enc, "encoded")
	if err != nil {
		t.Fatalf("the encoded configuration does not parse: %v\n%s", err, enc)
	}
	if err := back.Resolve(); err != nil {
		t.Fatalf("the encoded configuration does not resolve: %v\n%s", err, enc)
	}
	h1, err1 := c.Hash()
	h2, err2 := back.Hash()
	if err1 != nil || err2 != nil || h1 != h2 {
		d, _ := Diff(c, back)
		t.Fatalf("hash changes through Encode (%v, %v): %v\n%s", err1, err2, d, enc)
	}
}
