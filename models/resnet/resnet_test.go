package resnet_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"testing"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/internal/steptest"
	"github.com/ortrain/ortrain/models/resnet"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/optim"
)

// torchvision's published parameter counts at 1000 classes (sum of
// p.numel() over model.parameters()).
var torchvisionCounts = []struct {
	depth int
	want  int64
	build bool // also build the graph and count its initializers
}{
	{18, 11_689_512, true},
	{34, 21_797_672, false},
	{50, 25_557_032, true},
	{101, 44_549_160, false},
	{152, 60_192_808, false},
}

// TestParamCountMatchesTorchvision checks the closed form against
// torchvision's numbers for every depth, and, for ResNet-18 and -50, that
// the built graph holds exactly that many trained scalars.
func TestParamCountMatchesTorchvision(t *testing.T) {
	for _, tc := range torchvisionCounts {
		c := resnet.Default()
		c.Depth = tc.depth
		if got := c.ParamCount(); got != tc.want {
			t.Errorf("ResNet-%d formula: %d parameters, torchvision has %d", tc.depth, got, tc.want)
		}
		if !tc.build {
			continue
		}
		g, err := resnet.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := models.CountParams(g); got != tc.want {
			t.Errorf("ResNet-%d graph: %d parameters, torchvision has %d", tc.depth, got, tc.want)
		}
	}
}

// TestParamCountFormulaSmall checks formula against graph on reduced sizes,
// where widths, classes and channels differ from torchvision's.
func TestParamCountFormulaSmall(t *testing.T) {
	for _, c := range []resnet.Config{
		{Depth: 18, Classes: 7, Width: 8, ImageSize: 32, Channels: 1, Layout: "NCHW"},
		{Depth: 50, Classes: 3, Width: 4, ImageSize: 32, Channels: 3, Layout: "NHWC"},
		{Depth: 34, Classes: 10, Width: 2, ImageSize: 64, Channels: 3, Layout: "NCHW"},
	} {
		g, err := resnet.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := models.CountParams(g), c.ParamCount(); got != want {
			t.Errorf("%+v: graph has %d parameters, formula says %d", c, got, want)
		}
	}
}

// TestStateDictMatchesTorchvision compares the graph's initializer names and
// shapes with torchvision's state_dict (num_batches_tracked aside, which
// ONNX graphs do not carry), so weights trained by ortrain load into
// torchvision.models.resnetNN. It needs Debian's PyTorch and torchvision.
func TestStateDictMatchesTorchvision(t *testing.T) {
	for _, depth := range []int{18, 50} {
		script := `import json, sys, torchvision
m = getattr(torchvision.models, "resnet%d" % int(sys.argv[1]))(num_classes=10)
print(json.dumps({k: list(v.shape) for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}))`
		out, err := exec.Command("/usr/bin/python3", "-c", script, strconv.Itoa(depth)).Output()
		if err != nil {
			t.Skipf("torchvision not available through /usr/bin/python3: %v", err)
		}
		var want map[string][]int64
		if err := json.Unmarshal(out, &want); err != nil {
			t.Fatal(err)
		}
		c := resnet.Config{Depth: depth, Classes: 10, Width: 64, ImageSize: 32, Channels: 3, Layout: "NCHW"}
		g, err := resnet.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]int64{}
		for _, name := range g.InitOrder {
			if info := g.Info(name); info.Float() && info.Rank() >= 1 {
				got[name] = info.Shape
			}
		}
		for k, s := range want {
			if !slices.Equal(got[k], s) {
				t.Errorf("ResNet-%d %s: graph has shape %v, torchvision %v", depth, k, got[k], s)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("ResNet-%d: graph has %s, which torchvision's state_dict lacks", depth, k)
			}
		}
	}
}

// TestNHWCMatchesNCHW: the same weights (same seed) give the same logits for
// an image fed channels-first and channels-last.
func TestNHWCMatchesNCHW(t *testing.T) {
	orttest.Init(t)
	c := resnet.Config{Depth: 18, Classes: 5, Width: 4, ImageSize: 32, Channels: 3, Layout: "NCHW", Seed: 9}
	g1, err := resnet.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Layout = "NHWC"
	g2, err := resnet.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	const n, s = 2, 32
	chw := make([]float32, n*3*s*s)
	for i := range chw {
		chw[i] = float32(r.NormFloat64())
	}
	hwc := make([]float32, len(chw))
	for b := 0; b < n; b++ {
		for ch := 0; ch < 3; ch++ {
			for p := 0; p < s*s; p++ {
				hwc[b*3*s*s+p*3+ch] = chw[b*3*s*s+ch*s*s+p]
			}
		}
	}
	x1, _ := ort.NewTensor([]int64{n, 3, s, s}, chw)
	x2, _ := ort.NewTensor([]int64{n, s, s, 3}, hwc)
	defer x1.Close()
	defer x2.Close()
	// BatchNormalization runs in training mode in the exported forward
	// graph; both layouts see the same batch, so the statistics agree.
	a := ort.Data[float32](steptest.Forward(t, g1, map[string]*ort.Value{resnet.Input: x1})[resnet.Output])
	b := ort.Data[float32](steptest.Forward(t, g2, map[string]*ort.Value{resnet.Input: x2})[resnet.Output])
	if len(a) != n*5 || len(b) != n*5 {
		t.Fatalf("logits have %d and %d values, want %d", len(a), len(b), n*5)
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-4*(1+math.Abs(float64(a[i]))) {
			t.Fatalf("logit %d: NCHW %g, NHWC %g", i, a[i], b[i])
		}
	}
}

// TestTinyResNetTrains builds a ResNet-18 of width 8 on 32×32 images through
// the registry and artifacts.Build, and trains it with the three graphs on
// 4 classes (a fixed random template per class plus unit noise), SGD with
// Nesterov momentum, lr 0.05, batch 16, label smoothing 0.1. With smoothing
// the least reachable loss is 0.35 (the smoothed targets' entropy), chance
// is ln 4 = 1.39: the loss must start above 1.0 and end below 0.6 after 60
// steps, and the eval graph (BatchNorm on running statistics) must be
// below 0.8 on fresh data.
func TestTinyResNetTrains(t *testing.T) {
	m, err := models.Build("resnet", map[string]any{"depth": 18, "width": 8, "image_size": 32, "classes": 4, "label_smoothing": 0.1, "seed": 3})
	if err != nil {
		t.Fatal(err)
	}
	man, dir := steptest.BuildOrSkip(t, artifacts.Options{Graph: m.Graph, Loss: m.Loss, LabelSmoothing: m.LabelSmoothing,
		Optimizer: optim.Config{Kind: optim.SGD, Nesterov: true, Momentum: 0.9, LR: 0.05}})
	if man.ParamCount() != m.ParamCount {
		t.Errorf("manifest trains %d scalars, recipe says %d", man.ParamCount(), m.ParamCount)
	}
	tr := steptest.Open(t, dir)
	r := rand.New(rand.NewPCG(5, 6))
	const px = 3 * 32 * 32
	templates := make([][]float32, 4)
	for c := range templates {
		for i := 0; i < px; i++ {
			templates[c] = append(templates[c], float32(r.NormFloat64()))
		}
	}
	batch := func(n int) map[string]*ort.Value {
		x := make([]float32, px*n)
		y := make([]int64, n)
		for i := 0; i < n; i++ {
			c := r.IntN(4)
			y[i] = int64(c)
			for k := 0; k < px; k++ {
				x[px*i+k] = templates[c][k] + float32(r.NormFloat64())
			}
		}
		xv, _ := ort.NewTensor([]int64{int64(n), 3, 32, 32}, x)
		yv, _ := ort.NewTensor([]int64{int64(n)}, y)
		t.Cleanup(xv.Close)
		t.Cleanup(yv.Close)
		// The data loader's "label" feeds the loss's "target" (m.Feeds).
		return map[string]*ort.Value{resnet.Input: xv, "target": yv}
	}
	var first, last float64
	for step := 0; step < 60; step++ {
		l := tr.Step(batch(16), 0.05)
		if step == 0 {
			first = l
		}
		last = l
	}
	ev := tr.Eval(batch(32))
	t.Logf("tiny ResNet-18 (%d parameters): loss %.3f at step 1, %.3f at step 60, eval %.3f", m.ParamCount, first, last, ev)
	if first < 1.0 || last > 0.6 || ev > 0.8 {
		t.Errorf("loss %.3f -> %.3f (eval %.3f), want > 1.0 -> < 0.6, eval < 0.8", first, last, ev)
	}
}
