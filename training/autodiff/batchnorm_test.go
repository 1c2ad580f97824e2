package autodiff_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// trainingStep makes g's BatchNorms train (autodiff.TrainingBatchNorm, row
// statistics where rows and they apply) and outputs the loss, its
// gradients with respect to wrt and the running statistics' updates.
func trainingStep(t *testing.T, g *graph.Graph, loss string, wrt []string, rows bool) {
	t.Helper()
	trainingStepWith(t, g, loss, wrt, rows, autodiff.Options{})
}

// trainingStepWith is trainingStep differentiating with opts.
func trainingStepWith(t *testing.T, g *graph.Graph, loss string, wrt []string, rows bool, opts autodiff.Options) {
	t.Helper()
	ups, err := autodiff.TrainingBatchNorm(g, func(s string) string { return s + ".out" }, rows)
	if err != nil {
		t.Fatal(err)
	}
	grads, err := autodiff.GradientsWith(g, loss, wrt, "grad/", opts)
	if err != nil {
		t.Fatal(err)
	}
	g.Outputs = []string{loss}
	for _, w := range wrt {
		g.Outputs = append(g.Outputs, grads[w])
	}
	for _, u := range ups {
		g.Outputs = append(g.Outputs, u.Out)
	}
	g.Prune()
	g.StripStopGradients()
}

// TestTrainingBatchNormBatchOfUnknownSize: two training-mode BatchNorm
// layers whose batch is known only at run time (as an exported CNN's is)
// give the gradients and running-statistic updates of the same graph with
// the batch fixed, where every count is a constant; the first layer's
// updates are PyTorch's (the variance unbiased with M/(M-1)); the batch
// size is read from the input's shape once for both layers, though their
// counts (N·16, N·32) differ; and all four statistics are updated by one
// Split of one update.
func TestTrainingBatchNormBatchOfUnknownSize(t *testing.T) {
	orttest.Init(t)
	const batch, mom = 3, 0.8
	params := map[string][]int64{"g1": {2}, "b1": {2}, "m1": {2}, "v1": {2}, "g2": {2}, "b2": {2}, "m2": {2}, "v2": {2}}
	order := []string{"x", "r", "g1", "b1", "m1", "v1", "g2", "b2", "m2", "v2"}
	wrt := []string{"x", "g1", "b1", "g2", "b2"}
	build := func(n int64) *graph.Graph {
		g := graph.New("bn", graph.EmitOpset)
		shapes := map[string][]int64{"x": {n, 2, 4, 4}, "r": {n, 2, 4, 8}}
		for _, name := range order {
			shape := shapes[name]
			if shape == nil {
				shape = params[name]
			}
			g.AddInput(name, graph.Info{DType: ort.Float64, Known: true, Shape: shape})
		}
		b := graph.NewBuilder(g, "fwd/")
		bn := func(h, p string) string {
			return b.OpN("BatchNormalization", []string{h, "g" + p, "b" + p, "m" + p, "v" + p}, 3,
				ai("training_mode", 1), af("momentum", mom))[0]
		}
		h := b.Relu(bn("x", "1"))
		h = bn(b.Op("Concat", []string{h, h}, ai("axis", 3)), "2")
		loss := b.ReduceSum(b.Mul(h, "r"), false)
		g.FoldShapes()
		trainingStep(t, g, loss, wrt, false)
		return g
	}
	r := rand.New(rand.NewPCG(5, 6))
	data := map[string][]float64{"x": fill(r, normal, batch*2*16), "r": fill(r, normal, batch*2*32)}
	feed := map[string]*ort.Value{}
	for _, name := range order {
		shape := params[name]
		if name == "x" {
			shape = s(batch, 2, 4, 4)
		} else if name == "r" {
			shape = s(batch, 2, 4, 8)
		}
		if data[name] == nil {
			gen := normal
			if name[0] == 'v' {
				gen = positive
			}
			data[name] = fill(r, gen, int(ort.Numel(shape)))
		}
		feed[name] = tensor(t, ort.Float64, shape, data[name])
		defer feed[name].Close()
	}
	run := func(g *graph.Graph) [][]float64 { return runOutputs(t, g, feed) }
	dynamic, static := build(-1), build(batch)
	// The layers' inputs are x and the Concat's output; the loss's
	// gradient reads the shape of its own input.
	var read []string
	for _, n := range dynamic.Nodes {
		if n.Op == "Shape" && (n.Inputs[0] == "x" || strings.HasPrefix(n.Inputs[0], "fwd/Concat")) {
			read = append(read, n.Inputs[0])
		}
	}
	if len(read) != 1 || read[0] != "x" {
		t.Errorf("the BatchNorm layers read the shapes of %v, want x's once (the batch size, for both layers)", read)
	}
	// The four running statistics are updated together: one Split writes
	// them all.
	for _, g := range []*graph.Graph{dynamic, static} {
		writers := map[string]int{}
		for _, n := range g.Nodes {
			for _, o := range n.Outputs {
				if strings.HasSuffix(o, ".out") {
					writers[n.Op]++
				}
			}
		}
		if writers["Split"] != 4 || len(writers) != 1 {
			t.Errorf("the running statistics are written by %v, want one Split", writers)
		}
	}
	got, want := run(dynamic), run(static)
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: %d values, %d with the batch fixed", dynamic.Outputs[i], len(got[i]), len(want[i]))
		}
		for k := range want[i] {
			if d := math.Abs(got[i][k] - want[i][k]); d > 1e-12*(1+math.Abs(want[i][k])) {
				t.Errorf("%s[%d] = %.15g, %.15g with the batch fixed", dynamic.Outputs[i], k, got[i][k], want[i][k])
			}
		}
	}
	// The first layer's running statistics, computed here.
	const m = batch * 16
	for c := range 2 {
		var sum, sq float64
		for n := range batch {
			for _, v := range data["x"][(n*2+c)*16 : (n*2+c+1)*16] {
				sum += v
			}
		}
		mean := sum / m
		for n := range batch {
			for _, v := range data["x"][(n*2+c)*16 : (n*2+c+1)*16] {
				sq += (v - mean) * (v - mean)
			}
		}
		wantMean := mom*data["m1"][c] + (1-mom)*mean
		wantVar := mom*data["v1"][c] + (1-mom)*sq/(m-1)
		outs := map[string]float64{}
		for i, o := range dynamic.Outputs {
			outs[o] = got[i][min(c, len(got[i])-1)]
		}
		for name, want := range map[string]float64{"m1.out": wantMean, "v1.out": wantVar} {
			if d := math.Abs(outs[name] - want); d > 1e-6*(1+math.Abs(want)) {
				t.Errorf("%s[%d] = %.15g, want %.15g", name, c, outs[name], want)
			}
		}
	}
}

// TestBatchNormRowStatistics: a training BatchNorm over maps of 16×32 in
// float32 built for CUDA takes its batch statistics from one
// LayerNormalization's row means and inverse deviations; the loss, every
// gradient and the running statistics agree with the elementary
// statistics' graph (a reduction, the centred copy, its squares'
// reduction; what the CPU's builds keep) to float32's precision, and the
// running statistics with those computed here in float64, a row of one
// constant value (its deviation 0) among them. Run on the CPU provider,
// whose LayerNormalization computes E[x²] - E[x]² in float32: the data's
// mean is 1.5 deviations, where that still holds.
func TestBatchNormRowStatistics(t *testing.T) {
	orttest.Init(t)
	const batch, mom = 3, 0.9
	x := s(batch, 2, 16, 32)
	order := []string{"x", "r", "g", "b", "m", "v"}
	shapes := map[string][]int64{"x": x, "r": x, "g": s(2), "b": s(2), "m": s(2), "v": s(2)}
	wrt := []string{"x", "g", "b"}
	build := func(rows bool) (*graph.Graph, int) {
		g := graph.New("bn", graph.EmitOpset)
		for _, name := range order {
			g.AddInput(name, graph.Info{DType: ort.Float32, Known: true, Shape: shapes[name]})
		}
		b := graph.NewBuilder(g, "fwd/")
		y := b.OpN("BatchNormalization", []string{"x", "g", "b", "m", "v"}, 3, ai("training_mode", 1), af("momentum", mom))[0]
		loss := b.ReduceSum(b.Mul(b.Relu(y), "r"), false)
		trainingStep(t, g, loss, wrt, rows)
		return g, g.CountOp("LayerNormalization")
	}
	feed, data := bnFeed(t, rand.New(rand.NewPCG(7, 8)), order, shapes)
	rows, norms := build(true)
	elementary, none := build(false)
	if norms != 1 || none != 0 {
		t.Fatalf("%d LayerNormalization nodes (want 1), %d in the elementary graph", norms, none)
	}
	got := runOutputs(t, rows, feed)
	sameOutputs(t, rows.Outputs, got, runOutputs(t, elementary, feed), 2e-5)
	const m = batch * 512
	outs := map[string][]float64{}
	for i, o := range rows.Outputs {
		outs[o] = got[i]
	}
	for c := range 2 {
		var sum, sq float64
		for n := range batch {
			for _, v := range data["x"][(n*2+c)*512 : (n*2+c+1)*512] {
				sum += float64(float32(v))
			}
		}
		mean := sum / m
		for n := range batch {
			for _, v := range data["x"][(n*2+c)*512 : (n*2+c+1)*512] {
				sq += (float64(float32(v)) - mean) * (float64(float32(v)) - mean)
			}
		}
		for name, want := range map[string]float64{
			"m.out": mom*float64(float32(data["m"][c])) + (1-mom)*mean,
			"v.out": mom*float64(float32(data["v"][c])) + (1-mom)*sq/(m-1),
		} {
			if d := math.Abs(outs[name][c] - want); d > 1e-5*(1+math.Abs(want)) {
				t.Errorf("%s[%d] = %.9g, want %.9g", name, c, outs[name][c], want)
			}
		}
	}
}

// TestBatchNormRowStatisticsBounds: rows of fewer than 512 positions (a
// block each for the kernel) or more than 2¹⁶ (a volume's: a block each,
// few of them, and a scale of ones as large) keep the elementary
// statistics; float64 inputs do too.
func TestBatchNormRowStatisticsBounds(t *testing.T) {
	for _, tc := range []struct {
		shape []int64
		dt    ort.DType
		want  int
	}{
		{s(2, 2, 16, 32), ort.Float32, 1},
		{s(2, 2, 8, 8), ort.Float32, 0},
		{s(1, 2, 256, 512), ort.Float32, 0},
		{s(2, 2, 16, 32), ort.Float64, 0},
	} {
		g := graph.New("bn", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: tc.dt, Known: true, Shape: tc.shape})
		for _, p := range []string{"g", "b", "m", "v"} {
			g.AddInput(p, graph.Info{DType: tc.dt, Known: true, Shape: s(2)})
		}
		b := graph.NewBuilder(g, "fwd/")
		g.Outputs = []string{b.OpN("BatchNormalization", []string{"x", "g", "b", "m", "v"}, 3, ai("training_mode", 1))[0]}
		if _, err := autodiff.TrainingBatchNorm(g, func(s string) string { return s + ".out" }, true); err != nil {
			t.Fatal(err)
		}
		if norms := g.CountOp("LayerNormalization"); norms != tc.want {
			t.Errorf("%v %v: %d LayerNormalization nodes, want %d", tc.dt, tc.shape, norms, tc.want)
		}
	}
}

// TestBatchNormRowSums: where a training BatchNorm's input and gradient
// are float32 copies of float16 values (a 16-mixed CUDA build), dβ and dγ
// come from LayerNormalizations' row means (Options.RowSums), and the
// loss, every gradient and the running statistics agree with the
// reductions' graph within float32 precision, over an input whose mean is
// far from 0 with a constant row, for images, volumes and sequences (rows
// of 512, 512 and 600 positions); a 0.1% error in the scale the sums take
// fails it. Float32 values, or no RowSums, keep the reductions.
func TestBatchNormRowSums(t *testing.T) {
	orttest.Init(t)
	for _, x := range [][]int64{s(3, 2, 16, 32), s(2, 2, 8, 8, 8), s(3, 2, 600)} {
		t.Run(fmt.Sprint(x), func(t *testing.T) { rowSumsAgree(t, x) })
	}
}

func rowSumsAgree(t *testing.T, x []int64) {
	order := []string{"x", "r", "g", "b", "m", "v"}
	shapes := map[string][]int64{"x": x, "r": x, "g": s(2), "b": s(2), "m": s(2), "v": s(2)}
	wrt := []string{"x", "g", "b"}
	build := func(opts autodiff.Options, low bool) (*graph.Graph, int) {
		g := graph.New("bn", graph.EmitOpset)
		for _, name := range order {
			g.AddInput(name, graph.Info{DType: ort.Float32, Known: true, Shape: shapes[name]})
		}
		b := graph.NewBuilder(g, "fwd/")
		// As autocast leaves a float32 BatchNorm between float16 values.
		round := func(v string) string {
			if !low {
				return v
			}
			return b.Op("Cast", []string{b.Op("Cast", []string{v}, ai("to", int64(ort.Float16)))}, ai("to", int64(ort.Float32)))
		}
		y := b.OpN("BatchNormalization", []string{round("x"), "g", "b", "m", "v"}, 3, ai("training_mode", 1))[0]
		loss := b.ReduceSum(b.Mul(b.Relu(round(y)), "r"), false)
		trainingStepWith(t, g, loss, wrt, true, opts)
		return g, g.CountOp("LayerNormalization")
	}
	feed, _ := bnFeed(t, rand.New(rand.NewPCG(9, 10)), order, shapes)
	sums, norms := build(autodiff.Options{RowSums: true}, true)
	reductions, statsOnly := build(autodiff.Options{}, true)
	// One LayerNormalization for the statistics, and with RowSums one for
	// dβ and one for dγ.
	if norms != 3 || statsOnly != 1 {
		t.Fatalf("%d LayerNormalization nodes with RowSums (want 3), %d without (want 1)", norms, statsOnly)
	}
	if _, n := build(autodiff.Options{RowSums: true}, false); n != 1 {
		t.Errorf("float32 values: %d LayerNormalization nodes, want 1", n)
	}
	sameOutputs(t, sums.Outputs, runOutputs(t, sums, feed), runOutputs(t, reductions, feed), 2e-5)
}

// bnFeed feeds a BatchNorm test's float32 inputs, in order: normal values
// (the variance "v" positive), and x's with a mean far from 0 and one row
// (sample 1, channel 0 of two) a single value. It returns the values too;
// the tensors close when the test ends.
func bnFeed(t *testing.T, r *rand.Rand, order []string, shapes map[string][]int64) (map[string]*ort.Value, map[string][]float64) {
	t.Helper()
	feed, data := map[string]*ort.Value{}, map[string][]float64{}
	for _, name := range order {
		gen := normal
		if name == "v" {
			gen = positive
		}
		v := fill(r, gen, int(ort.Numel(shapes[name])))
		if name == "x" {
			rows := int(ort.Numel(shapes[name][2:]))
			for i := range v {
				v[i] = 3 + 2*v[i]
			}
			for i := range rows {
				v[2*rows+i] = 1.25
			}
		}
		data[name] = v
		feed[name] = tensor(t, ort.Float32, shapes[name], v)
		t.Cleanup(feed[name].Close)
	}
	return feed, data
}

// sameOutputs checks each of got's outputs against want's within tol of
// want's largest magnitude (a NaN fails).
func sameOutputs(t *testing.T, names []string, got, want [][]float64, tol float64) {
	t.Helper()
	for i := range want {
		var diff, scale float64
		for k := range want[i] {
			diff = max(diff, math.Abs(got[i][k]-want[i][k]))
			scale = max(scale, math.Abs(want[i][k]))
		}
		if !(diff <= tol*scale) {
			t.Errorf("%s differs by %.3g (largest value %.3g)", names[i], diff, scale)
		}
	}
}
