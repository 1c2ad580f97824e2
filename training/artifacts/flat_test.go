package artifacts_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
)

// TestManifestGroupsChecked: a manifest whose optimizer groups would make
// the trainer view memory outside a flat tensor, or two parameters in the
// same place, or leave a parameter out, is refused on load, naming the
// file and the parameter.
func TestManifestGroupsChecked(t *testing.T) {
	orttest.Init(t)
	dir := filepath.Join(t.TempDir(), "a")
	if _, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(1, 2))), Out: dir, Loss: "cross_entropy"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, artifacts.ManifestFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifacts.Load(dir); err != nil {
		t.Fatalf("the built manifest: %v", err)
	}
	cases := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"past the end", func(m map[string]any) { member(m, 0, 0)["offset"] = group(m, 0)["size"] }, "outside"},
		{"overlap", func(m map[string]any) { member(m, 0, 1)["offset"] = member(m, 0, 0)["offset"] }, "overlapping"},
		{"wrong shape", func(m map[string]any) { member(m, 0, 0)["shape"] = []int{1} }, "the parameter is"},
		{"unknown", func(m map[string]any) { member(m, 0, 0)["param"] = "nope" }, "not a trained parameter"},
		{"left out", func(m map[string]any) {
			g := group(m, 0)
			g["members"] = g["members"].([]any)[1:]
		}, "in no group"},
		{"no groups, no reset", func(m map[string]any) { delete(m["optimizer"].(map[string]any), "groups") }, "no flat groups"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(good, &m); err != nil {
				t.Fatal(err)
			}
			c.edit(m)
			b, _ := json.Marshal(m)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := artifacts.Load(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Load: %v; want an error naming %s and saying %q", err, path, c.want)
			}
		})
	}
}

func group(m map[string]any, g int) map[string]any {
	return m["optimizer"].(map[string]any)["groups"].([]any)[g].(map[string]any)
}

func member(m map[string]any, g, i int) map[string]any {
	return group(m, g)["members"].([]any)[i].(map[string]any)
}
