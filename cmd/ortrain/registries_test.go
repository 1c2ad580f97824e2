package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/metrics"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/loss"
)

var updateRegistries = flag.Bool("update-registries", false, "rewrite docs/REGISTRIES.md from the registries")

// TestRegistriesDoc: docs/REGISTRIES.md is generated from the registries
// config validation and the commands read (recipes with their parameters
// and defaults, data kinds, built-in losses, validation metrics,
// presets); it fails when the file is stale. Regenerate with
//
//	go test ./cmd/ortrain -run RegistriesDoc -update-registries
func TestRegistriesDoc(t *testing.T) {
	var b bytes.Buffer
	fmt.Fprintln(&b, "# Registries")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "Generated from the code (`go test ./cmd/ortrain -run RegistriesDoc -update-registries`); do not edit.")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "## Recipes (`model.recipe`, parameters under `[model.params]`)")
	for _, name := range models.Names() {
		r, _ := models.Lookup(name)
		fmt.Fprintf(&b, "\n### %s\n\n%s.", name, r.Summary)
		if parts := r.Parts(); len(parts) > 0 {
			fmt.Fprintf(&b, " Parts for `export --part`: %s.", strings.Join(parts, ", "))
		}
		fmt.Fprintln(&b)
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "| parameter | default |")
		fmt.Fprintln(&b, "| --- | --- |")
		for _, p := range r.Params() {
			fmt.Fprintf(&b, "| `%s` | `%v` |\n", p.Key, p.Default)
		}
	}
	fmt.Fprintf(&b, "\n## Data kinds (`data.kind`)\n\n%s\n", code(config.DataKinds))
	fmt.Fprintf(&b, "\n## Built-in losses (`model.loss`, `--loss`)\n\n%s on the model's first output, or `KIND:OUTPUT` on another (`cross_entropy:logits`); "+
		"`output:NAME`, or just `NAME`, for a model that computes its own\n", code(loss.Kinds))
	fmt.Fprintln(&b, "\n## Validation metrics (logged, `trainer.monitor`, eval)")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| name | what |")
	fmt.Fprintln(&b, "| --- | --- |")
	for _, m := range metrics.ValNames {
		fmt.Fprintf(&b, "| `%s` | %s |\n", m.Name, m.What)
	}
	fmt.Fprintln(&b, "\n## Presets (`--preset NAME`, `configs/`)")
	fmt.Fprintln(&b)
	for _, name := range configs.Names() {
		raw, err := configs.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		// The preset's opening comment, as one line.
		var lines []string
		for _, l := range strings.Split(string(raw), "\n") {
			if !strings.HasPrefix(l, "#") {
				break
			}
			lines = append(lines, strings.TrimSpace(strings.TrimPrefix(l, "#")))
		}
		fmt.Fprintf(&b, "- `%s`: %s\n", name, strings.Join(lines, " "))
	}
	path := filepath.Join("..", "..", "docs", "REGISTRIES.md")
	if *updateRegistries {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(have, b.Bytes()) {
		t.Errorf("%s is stale (%v): go test ./cmd/ortrain -run RegistriesDoc -update-registries", path, err)
	}
}

func code(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return strings.Join(out, ", ")
}
