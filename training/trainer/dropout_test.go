package trainer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/graph"
)

// dropoutMLP is mlp, its input scaled by 0.5, with Dropout(p = 0.5,
// training_mode = true) on the listed values: "x", the scaled input, whose
// mask no backward reads (x needs no gradient), and "h", the hidden
// activations, whose mask the backward reuses. These are the nodes a PyTorch export of nn.Dropout in
// train() mode writes.
func dropoutMLP(t *testing.T, on ...string) *graph.Graph {
	t.Helper()
	g := mlp(rand.New(rand.NewPCG(5, 6)))
	b := graph.NewBuilder(g, "drop/")
	drop := func(v string) string {
		return b.Op("Dropout", []string{v, b.Scalar(ort.Float32, 0.5), b.Const(graph.Raw("", ort.Bool, nil, []byte{1}))})
	}
	for _, n := range slices.Clone(g.Nodes) {
		switch {
		case n.Op == "Gemm":
			// The input is scaled first: ONNX Runtime keeps a Dropout that
			// reads a graph input directly, deletes one after a node.
			n.Inputs[0] = b.Mul(n.Inputs[0], b.Scalar(ort.Float32, 0.5))
			if slices.Contains(on, "x") {
				n.Inputs[0] = drop(n.Inputs[0])
			}
		case n.Op == "MatMul" && slices.Contains(on, "h"):
			n.Inputs[0] = drop(n.Inputs[0])
		}
	}
	if err := g.Sort(); err != nil {
		t.Fatal(err)
	}
	return g
}

// dropoutLosses trains the model (an ONNX file, built into artifacts by
// the run as `ortrain train` does) for four steps under seed and returns
// the step losses.
func dropoutLosses(t *testing.T, model string, seed int) []float64 {
	t.Helper()
	c, err := config.Parse([]byte(`name = "drop"
[model]
loss = "cross_entropy"
[data]
kind = "synthetic"
batch_size = 16
num_workers = 0
[trainer]
device = "cpu"
max_steps = 4
val_check_interval = 100
checkpoint_every_n_steps = 0
[optimizer]
lr = 0.05
`), "drop.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Override(`model.onnx="`+model+`"`, "seed="+strconv.Itoa(seed), `output_dir="`+filepath.Join(t.TempDir(), "outputs")+`"`); err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	losses := runConfig(t, c, newBlobs(96, 1), newBlobs(16, 2))
	if len(losses) != 4 {
		t.Fatalf("%d steps logged, want 4", len(losses))
	}
	return losses
}

// TestDropoutTrains: a model with Dropout p = 0.5 trains with its
// Dropouts on, with masks drawn from the run's seed. ONNX Runtime deletes
// a Dropout whose mask output nothing reads (its EliminateDropout rule,
// whatever the ratio or training mode), which is every Dropout on a value
// that needs no gradient; and a Dropout without a seed attribute draws
// from a generator seeded by the clock. So: one seed gives the same
// losses twice, two seeds different ones, and either differs from the
// model without the Dropouts, also with the Dropout on the input alone.
func TestDropoutTrains(t *testing.T) {
	orttest.Init(t)
	dir := t.TempDir()
	save := func(name string, g *graph.Graph) string {
		raw, err := g.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".onnx")
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	both, input, none := save("both", dropoutMLP(t, "x", "h")), save("input", dropoutMLP(t, "x")), save("none", dropoutMLP(t))
	a, again, other := dropoutLosses(t, both, 1), dropoutLosses(t, both, 1), dropoutLosses(t, both, 2)
	plain := dropoutLosses(t, none, 1)
	onInput := dropoutLosses(t, input, 1)
	t.Logf("seed 1 %v\nseed 1 again %v\nseed 2 %v\nno dropout %v\ninput dropout only %v", a, again, other, plain, onInput)
	if !slices.Equal(a, again) {
		t.Errorf("seed 1 twice: losses %v, then %v; want the same", a, again)
	}
	if slices.Equal(a, other) {
		t.Errorf("seeds 1 and 2: the same losses %v; want different masks", a)
	}
	if slices.Equal(a, plain) {
		t.Errorf("with Dropout p = 0.5 the losses %v are those without: the Dropouts did not run", a)
	}
	if slices.Equal(onInput, plain) {
		t.Errorf("with Dropout p = 0.5 on the input the losses %v are those without: the Dropout (whose mask nothing reads) was removed", onInput)
	}
}
