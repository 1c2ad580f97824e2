package setup

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/graph"
)

// TestDropoutSeeds: the training graph's Dropouts carry seeds derived from
// the run's seed, a different one each; the eval graph's are off. A run
// on prebuilt artifacts whose Dropouts were seeded from another seed is
// refused naming the seed key and both fixes, not trained with the built
// masks while logging its own seed.
func TestDropoutSeeds(t *testing.T) {
	orttest.Init(t)
	g := graph.New("m", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
	g.AddInitializer(graph.Float32s("w", []int64{4, 4}, []float32{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}))
	b := graph.NewBuilder(g, "")
	on := func() string { return b.Const(graph.Raw("", ort.Bool, nil, []byte{1})) }
	h := b.Op("Dropout", []string{b.MatMul("x", "w"), b.Scalar(ort.Float32, 0.5), on()})
	b.OpInto("y", "Dropout", []string{h, b.Scalar(ort.Float32, 0.5), on()})
	g.Outputs = []string{"y"}
	seeds := func(dir, file string) []int64 {
		gr, err := graph.Load(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var s []int64
		for _, n := range gr.Nodes {
			if n.Op == "Dropout" {
				if len(n.Inputs) > 1 && file == artifacts.EvalFile {
					t.Errorf("eval graph: Dropout %s is not off (inputs %v)", n.Name, n.Inputs)
				}
				if n.Attr("seed") != nil {
					s = append(s, n.Int("seed", -1))
				}
			}
		}
		return s
	}
	build := func(seed int64) string {
		dir := filepath.Join(t.TempDir(), "art")
		m, err := artifacts.Build(artifacts.Options{Graph: g, Out: dir, Loss: "mse", Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if m.RandomSeed == nil || *m.RandomSeed != seed {
			t.Errorf("manifest random_seed %v, want %d", m.RandomSeed, seed)
		}
		return dir
	}
	a, again, other := build(3), build(3), build(4)
	sa, sagain, sother := seeds(a, artifacts.TrainingFile), seeds(again, artifacts.TrainingFile), seeds(other, artifacts.TrainingFile)
	seeds(a, artifacts.EvalFile)
	if len(sa) != 2 || sa[0] == sa[1] || sa[0] < 0 || sa[1] < 0 {
		t.Fatalf("training graph Dropout seeds %v: want two different non-negative ones", sa)
	}
	if sa[0] != sagain[0] || sa[1] != sagain[1] || sa[0] == sother[0] || sa[1] == sother[1] {
		t.Errorf("seeds from run seed 3: %v, again %v; from 4: %v", sa, sagain, sother)
	}

	conf := func(seed string) *config.Config {
		c, err := config.Parse([]byte("seed = "+seed+"\n[model]\nartifacts = \""+a+"\"\nloss = \"mse\"\n[data]\nkind = \"synthetic\"\n[trainer]\nmax_steps = 1\n"), "s.toml")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Resolve(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, _, err := Artifacts(conf("3"), t.TempDir(), ort.Options{}); err != nil {
		t.Errorf("prebuilt artifacts at their own seed: %v", err)
	}
	_, _, err := Artifacts(conf("5"), t.TempDir(), ort.Options{})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "seed" || !strings.Contains(err.Error(), "seed = 3") || !strings.Contains(err.Error(), "--seed 5") {
		t.Errorf("seed 5 on artifacts seeded from 3: err %v, want a refusal naming seed, seed = 3 and --seed 5", err)
	}
}
