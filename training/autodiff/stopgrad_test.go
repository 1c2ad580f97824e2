package autodiff_test

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// TestStopGradientCuts: d/dx sum(x·sg(x)) is sg(x) = x, not 2x; by marker
// and by name (StopGradientAt, what --stop-gradient does).
func TestStopGradientCuts(t *testing.T) {
	x := []float64{0.3, -1.2, 0.7, 2.0, -0.4, 1.1}
	marker, g := gradsOf(t, [][]int64{{2, 3}}, []string{"a"}, func(b *graph.Builder, v []string) string {
		return b.ReduceSum(b.Mul(v[0], b.StopGradient(v[0])), false)
	}, [][]float64{x})
	for _, n := range g.Nodes {
		if n.Domain == graph.StopGradientDomain {
			t.Errorf("node %s of domain %s left in the graph ONNX Runtime runs", n.Name, n.Domain)
		}
	}
	if _, ok := g.Domains[graph.StopGradientDomain]; ok {
		t.Error("the ortrain domain import was not stripped")
	}
	byName, _ := gradsOf(t, [][]int64{{2, 3}}, []string{"a"}, func(b *graph.Builder, v []string) string {
		e := b.Exp(v[0])
		loss := b.ReduceSum(b.Mul(v[0], e), false) // d/dx = exp(x), not exp(x)(1+x)
		if err := b.G.StopGradientAt([]string{e}); err != nil {
			t.Fatal(err)
		}
		return loss
	}, [][]float64{x})
	for i := range x {
		if marker["a"][i] != x[i] {
			t.Errorf("marker: grad[%d] = %g, want %g", i, marker["a"][i], x[i])
		}
		if math.Abs(byName["a"][i]-math.Exp(x[i])) > 1e-12 {
			t.Errorf("by name: grad[%d] = %g, want %g", i, byName["a"][i], math.Exp(x[i]))
		}
	}
	g2 := graph.New("t", graph.EmitOpset)
	var bi interface{ BadInput() bool }
	if err := g2.StopGradientAt([]string{"nope"}); err == nil || !asBad(err, &bi) {
		t.Errorf("unknown name: err = %v, want a bad-input error", err)
	}
}

func asBad(err error, bi *interface{ BadInput() bool }) bool {
	b, ok := err.(interface{ BadInput() bool })
	*bi = b
	return ok && b.BadInput()
}

// vqExport is a small PyTorch VQ model: Conv1d, GroupNorm (exported at
// opset 17 as Reshape → InstanceNormalization → Reshape → Mul → Add), SiLU,
// a codebook looked up by ArgMin, the straight-through estimator and the
// codebook and commitment losses, all written with stop_gradient. It writes
// the ONNX model and PyTorch autograd's loss and gradients (with .detach()).
const vqExport = `
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from ortrain_export import export, stop_gradient
torch.manual_seed(0)
class VQ(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Conv1d(2, 4, 3, padding=1)
        self.norm = torch.nn.GroupNorm(2, 4)
        self.codebook = torch.nn.Parameter(torch.randn(5, 4))
        self.dec = torch.nn.Conv1d(4, 2, 1)
    def forward(self, x):
        z = torch.nn.functional.silu(self.norm(self.enc(x)))      # (N, 4, L)
        zf = z.transpose(1, 2)                                     # (N, L, 4)
        d = (zf.unsqueeze(2) - self.codebook).pow(2).sum(-1)       # (N, L, 5)
        q = self.codebook[d.argmin(-1)]
        st = zf + stop_gradient(q - zf)
        codebook = (q - stop_gradient(zf)).pow(2).mean()
        commit = (zf - stop_gradient(q)).pow(2).mean()
        y = self.dec(st.transpose(1, 2))
        return (y - x).pow(2).mean() + codebook + 0.25 * commit
m = VQ()
x = torch.randn(3, 2, 6)
export(m, {"x": x}, sys.argv[2] + "/vq.onnx", output_names=["loss"])
loss = m(x)
loss.backward()
json.dump({"x": x.flatten().tolist(), "loss": loss.item(),
           "grads": {k: p.grad.flatten().tolist() for k, p in m.named_parameters()}},
          open(sys.argv[2] + "/ref.json", "w"))
`

// TestStopGradientFromPyTorch: a model exported with stop_gradient gets,
// from ortrain's autodiff on stock ONNX Runtime, the gradients PyTorch
// computes with .detach(). float32 throughout; 1e-4 relative + 1e-5
// absolute covers float32 rounding of sums over tens of terms (~1e-6
// relative) with room, while a gradient leaking through a marker changes
// the encoder's and codebook's gradients by O(1).
func TestStopGradientFromPyTorch(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Skip("skipping: /usr/bin/python3 cannot import torch (Debian's python3-torch): ", err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "vq.py")
	os.WriteFile(script, []byte(vqExport), 0o644)
	pyDir, _ := filepath.Abs("../../models/pytorch")
	if out, err := exec.Command("/usr/bin/python3", script, pyDir, dir).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	var ref struct {
		X     []float64
		Loss  float64
		Grads map[string][]float64
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "ref.json"))
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	g, err := graph.Load(filepath.Join(dir, "vq.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	markers, instNorm := 0, 0
	for _, n := range g.Nodes {
		if graph.IsStopGradient(n) {
			markers++
		}
		if n.Op == "InstanceNormalization" {
			instNorm++
		}
	}
	if markers != 3 || instNorm != 1 {
		t.Fatalf("export has %d StopGradient and %d InstanceNormalization nodes, want 3 and 1", markers, instNorm)
	}
	var params []string
	for name := range ref.Grads {
		params = append(params, name)
	}
	grads, err := autodiff.Gradients(g, "loss", params, "grad/")
	if err != nil {
		t.Fatal(err)
	}
	g.Outputs = []string{"loss"}
	for _, p := range params {
		g.Outputs = append(g.Outputs, grads[p])
	}
	g.Prune()
	g.StripStopGradients()
	m, _ := g.Marshal()
	orttest.Init(t)
	sess, err := ort.NewSessionFromBytes(m, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	xv := tensor(t, f32, []int64{3, 2, 6}, ref.X)
	defer xv.Close()
	outs, err := sess.Run(map[string]*ort.Value{"x": xv})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, o := range outs {
			o.Close()
		}
	}()
	if l := values(outs[0])[0]; math.Abs(l-ref.Loss) > 1e-5*math.Abs(ref.Loss) {
		t.Errorf("loss %g, PyTorch %g", l, ref.Loss)
	}
	for i, p := range params {
		got, want := values(outs[1+i]), ref.Grads[p]
		for k := range want {
			if math.Abs(got[k]-want[k]) > 1e-5+1e-4*math.Abs(want[k]) {
				t.Errorf("d loss/d %s[%d] = %g, PyTorch %g", p, k, got[k], want[k])
				break
			}
		}
	}
}
