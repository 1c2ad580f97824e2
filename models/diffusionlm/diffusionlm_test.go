package diffusionlm_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/diffusionlm"
	"github.com/ortrain/ortrain/models/internal/steptest"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// tiny is a test size: vocabulary 20 with mask token 19, width 16, 2
// layers of 2 heads, 8 tokens in blocks of 4.
func tiny() diffusionlm.Config {
	return diffusionlm.Config{Vocab: 20, MaskToken: 19, Hidden: 16, Layers: 2, Heads: 2, MLPRatio: 4,
		SeqLen: 8, BlockSize: 4, Positions: "learned", TieEmbeddings: true, Seed: 1}
}

// TestParamCount: the default (BD3-LM small) count is GPT-2 small's plus one
// embedding row, its transformer blocks hold the 85M the seeds quote, and on
// built graphs (tied or not, learned or sinusoidal positions, HDP segments)
// the formula equals the trained scalars.
func TestParamCount(t *testing.T) {
	d := diffusionlm.Default()
	if got, want := d.ParamCount(), int64(124_440_576); got != want {
		t.Errorf("default: formula %d, want %d", got, want)
	}
	if got, want := int64(d.Layers)*d.BlockParams(), int64(85_054_464); got != want {
		t.Errorf("default transformer blocks: %d, want %d", got, want)
	}
	untied := tiny()
	untied.TieEmbeddings = false
	sinus := tiny()
	sinus.Positions = "sinusoidal"
	hdp := tiny()
	hdp.Blocks, hdp.MLPRatio = []int{2, 2, 4}, 2
	gpt2vocab := tiny()
	gpt2vocab.Vocab, gpt2vocab.MaskToken = 50258, 50257
	for name, c := range map[string]diffusionlm.Config{"tiny": tiny(), "untied": untied, "sinusoidal": sinus, "hdp": hdp, "gpt2 vocab": gpt2vocab} {
		g, err := diffusionlm.Build(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, want := models.CountParams(g), c.ParamCount(); got != want {
			t.Errorf("%s: graph has %d parameters, formula says %d", name, got, want)
		}
	}
}

// TestAttentionMask spells out the mask for 4 tokens in blocks of 2 over
// x_t ⊕ x_0 (rows: queries, 1: may attend).
func TestAttentionMask(t *testing.T) {
	c := tiny()
	c.SeqLen, c.BlockSize = 4, 2
	want := [8][8]int{
		// x_t block 0, x_t block 1, x_0 block 0, x_0 block 1
		{1, 1, 0, 0, 0, 0, 0, 0},
		{1, 1, 0, 0, 0, 0, 0, 0},
		{0, 0, 1, 1, 1, 1, 0, 0},
		{0, 0, 1, 1, 1, 1, 0, 0},
		{0, 0, 0, 0, 1, 1, 0, 0},
		{0, 0, 0, 0, 1, 1, 0, 0},
		{0, 0, 0, 0, 1, 1, 1, 1},
		{0, 0, 0, 0, 1, 1, 1, 1},
	}
	m := c.AttentionMask()
	for q := range 8 {
		for k := range 8 {
			if got := m[q*8+k] == 0; got != (want[q][k] == 1) {
				t.Errorf("query %d key %d: allowed %v, want %v", q, k, got, want[q][k] == 1)
			}
		}
	}
}

// batch is a tiny-vocabulary batch: clean tokens in [0, 19), the first
// block a prompt (never masked, loss_mask 0), later blocks masked with
// their block's level t.
type batch struct {
	x0, xt []int64
	t      []float32
	lm     []uint8
}

func newBatch(r *rand.Rand, c diffusionlm.Config, n int) batch {
	L := c.SeqLen
	of := c.BlockOf()
	var b batch
	for range n {
		level := map[int]float64{}
		for p := 0; p < L; p++ {
			tok := int64(r.IntN(c.MaskToken))
			if p >= c.BlockSize { // answer: a copy of the prompt, learnable
				tok = b.x0[len(b.x0)-c.BlockSize]
			}
			lv, ok := level[of[p]]
			if !ok {
				lv = 0.1 + 0.9*r.Float64()
				level[of[p]] = lv
			}
			noisy, lm := tok, uint8(0)
			if p >= c.BlockSize {
				lm = 1
				if r.Float64() < lv {
					noisy = int64(c.MaskToken)
				}
			}
			b.x0, b.xt, b.t, b.lm = append(b.x0, tok), append(b.xt, noisy), append(b.t, float32(lv)), append(b.lm, lm)
		}
	}
	return b
}

func (b batch) feeds(tb testing.TB, L int) map[string]*ort.Value {
	n := int64(len(b.x0) / L)
	s := []int64{n, int64(L)}
	x0, _ := ort.NewTensor(s, b.x0)
	xt, _ := ort.NewTensor(s, b.xt)
	tt, _ := ort.NewTensor(s, b.t)
	lm, _ := ort.NewTensor(s, b.lm)
	for _, v := range []*ort.Value{x0, xt, tt, lm} {
		tb.Cleanup(v.Close)
	}
	return map[string]*ort.Value{diffusionlm.InputIDs: x0, diffusionlm.NoisyIDs: xt, diffusionlm.T: tt, diffusionlm.LossMask: lm}
}

// TestForwardLoss runs the tiny model forward on ONNX Runtime and recomputes
// the loss from its logits in Go: Σ over masked positions of −log
// softmax(logits)[x_0] / t, over Σ loss_mask. It also checks that the mask
// token is never predicted.
func TestForwardLoss(t *testing.T) {
	orttest.Init(t)
	c := tiny()
	g, err := diffusionlm.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	b := newBatch(rand.New(rand.NewPCG(1, 2)), c, 3)
	out := steptest.Forward(t, g, b.feeds(t, c.SeqLen))
	if s := out[diffusionlm.Logits].Shape(); !slices.Equal(s, []int64{3, 8, 20}) {
		t.Fatalf("logits shape %v, want [3 8 20]", s)
	}
	logits := ort.Data[float32](out[diffusionlm.Logits])
	var num, den float64
	for p := range b.x0 {
		row := logits[p*c.Vocab : (p+1)*c.Vocab]
		if row[c.MaskToken] > -1e8 {
			t.Fatalf("position %d: mask token logit %g, want suppressed", p, row[c.MaskToken])
		}
		den += float64(b.lm[p])
		if b.xt[p] != int64(c.MaskToken) {
			continue
		}
		mx := float64(slices.Max(row))
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		num += (mx + math.Log(s) - float64(row[b.x0[p]])) / float64(b.t[p])
	}
	want := num / den
	got := float64(ort.Data[float32](out[diffusionlm.Loss])[0])
	t.Logf("loss %.5f, recomputed %.5f", got, want)
	if math.Abs(got-want) > 1e-4*(1+want) {
		t.Errorf("loss %g, recomputed from logits %g", got, want)
	}
}

// TestLossMatchesLogSumExp: the loss computed through LogSoftmax in pieces
// of the sequence equals, in value and in its gradients, the formulation it
// replaced (logsumexp(logits) − logit(x_0) through ReduceLogSumExp), built
// here into the same graph from its Logits output: one piece, three
// unequal pieces (8 positions as 3, 3, 2) and one piece per position.
func TestLossMatchesLogSumExp(t *testing.T) {
	orttest.Init(t)
	for _, pieces := range []int{0, 3, 8} {
		c := tiny()
		c.LossPieces = pieces
		if got := len(c.PieceSizes()); got != max(pieces, 1) {
			t.Fatalf("loss_pieces %d: %d pieces", pieces, got)
		}
		g, err := diffusionlm.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.CountOp("ReduceLogSumExp"); got != 0 {
			t.Fatalf("loss_pieces %d: %d ReduceLogSumExp nodes, want none", pieces, got)
		}
		if got := g.CountOp("LogSoftmax"); got != max(pieces, 1) {
			t.Errorf("loss_pieces %d: %d LogSoftmax nodes, want one per piece", pieces, got)
		}
		b := graph.NewBuilder(g, "old/")
		logits := diffusionlm.Logits
		lse := b.ReduceLogSumExp(logits, false, 2)
		tgt := b.Squeeze(b.Op("GatherElements", []string{logits, b.Unsqueeze(diffusionlm.InputIDs, 2)}, graph.AInt("axis", 2)), 2)
		masked := b.Cast(b.Equal(diffusionlm.NoisyIDs, b.Const(graph.Int64s("", nil, []int64{int64(c.MaskToken)}))), dtype.Float32)
		num := b.ReduceSum(b.Div(b.Mul(b.Sub(lse, tgt), masked), diffusionlm.T), false)
		den := b.Max(b.ReduceSum(b.Cast(diffusionlm.LossMask, dtype.Float32), false), b.Scalar(dtype.Float32, 1))
		old := b.Div(num, den)
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		var params []string
		for _, name := range g.InitOrder {
			if info := g.Info(name); info.Float() && info.Rank() >= 1 {
				params = append(params, name)
			}
		}
		gNew, err := autodiff.Gradients(g, diffusionlm.Loss, params, "grad_new/")
		if err != nil {
			t.Fatal(err)
		}
		gOld, err := autodiff.Gradients(g, old, params, "grad_old/")
		if err != nil {
			t.Fatal(err)
		}
		names := []string{diffusionlm.Loss, old}
		for _, p := range params {
			names = append(names, gNew[p], gOld[p])
		}
		bt := newBatch(rand.New(rand.NewPCG(1, 2)), c, 3)
		out := steptest.Forward(t, g, bt.feeds(t, c.SeqLen), names...)
		got, want := float64(ort.Data[float32](out[diffusionlm.Loss])[0]), float64(ort.Data[float32](out[old])[0])
		t.Logf("loss_pieces %d: loss %.9g, through ReduceLogSumExp %.9g", pieces, got, want)
		if math.Abs(got-want) > 1e-6*math.Abs(want) {
			t.Errorf("loss_pieces %d: loss %.9g, the ReduceLogSumExp formulation gives %.9g", pieces, got, want)
		}
		for _, p := range params {
			a, o := ort.Data[float32](out[gNew[p]]), ort.Data[float32](out[gOld[p]])
			var diff, scale float64
			for i := range a {
				diff = max(diff, math.Abs(float64(a[i]-o[i])))
				scale = max(scale, math.Abs(float64(o[i])))
			}
			// The attention keys' biases get a gradient of zero up to
			// rounding (softmax ignores a shift along its axis): 1e-9 absolute.
			if diff > 1e-5*scale+1e-9 || scale == 0 && p == "tok_emb.weight" {
				t.Errorf("loss_pieces %d: gradient of %s differs by up to %g (largest %g)", pieces, p, diff, scale)
			}
		}
	}
}

// TestBlockCausality perturbs single tokens and checks which positions'
// logits change: a clean token of block k may only move the predictions of
// blocks after k, and a noised token of block k only those of block k.
func TestBlockCausality(t *testing.T) {
	orttest.Init(t)
	c := tiny()
	c.SeqLen, c.BlockSize = 12, 4
	g, err := diffusionlm.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	base := newBatch(rand.New(rand.NewPCG(3, 4)), c, 1)
	logits := func(b batch) []float32 {
		return slices.Clone(ort.Data[float32](steptest.Forward(t, g, b.feeds(t, c.SeqLen), diffusionlm.Logits)[diffusionlm.Logits]))
	}
	ref := logits(base)
	changed := func(a []float32) []int { // blocks whose logits moved
		var blocks []int
		for p := 0; p < c.SeqLen; p++ {
			for v := 0; v < c.Vocab; v++ {
				if math.Abs(float64(a[p*c.Vocab+v]-ref[p*c.Vocab+v])) > 1e-5 {
					if bl := p / c.BlockSize; !slices.Contains(blocks, bl) {
						blocks = append(blocks, bl)
					}
					break
				}
			}
		}
		return blocks
	}
	for _, tc := range []struct {
		name  string
		clean bool
		pos   int
		want  []int
	}{
		{"clean token in block 0", true, 1, []int{1, 2}},
		{"clean token in block 1", true, 5, []int{2}},
		{"clean token in block 2", true, 10, nil},
		{"noised token in block 0", false, 2, []int{0}},
		{"noised token in block 1", false, 6, []int{1}},
	} {
		b := base
		b.x0, b.xt = slices.Clone(base.x0), slices.Clone(base.xt)
		seq := b.xt
		if tc.clean {
			seq = b.x0
		}
		seq[tc.pos] = (seq[tc.pos] + 1) % int64(c.MaskToken)
		if got := changed(logits(b)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: logits of blocks %v changed, want %v", tc.name, got, tc.want)
		}
	}
}

// TestTinyLMTrains trains the tiny model through artifacts.Build's graphs
// with AdamW (lr 1e-2, batch 16) on a copy task (the answer blocks repeat
// the prompt block, which a block-diffusion model sees clean): the NELBO
// must fall below half its first value in 600 steps. (It stays near 2 for
// the first 200 or so, until attention finds the position to copy from,
// then drops to about 0.005.) It skips while
// autodiff lacks a rule the model needs (Gather, LayerNormalization, Erf...).
func TestTinyLMTrains(t *testing.T) {
	c := tiny()
	m, err := models.Build("bd3lm", map[string]any{"vocab": 20, "mask_token": 19, "hidden": 16, "layers": 2, "heads": 2,
		"seq_len": 8, "block_size": 4, "seed": 1})
	if err != nil {
		t.Fatal(err)
	}
	if m.ParamCount != c.ParamCount() {
		t.Fatalf("registry built %d parameters, tiny() has %d", m.ParamCount, c.ParamCount())
	}
	_, dir := steptest.BuildOrSkip(t, artifacts.Options{Graph: m.Graph, Loss: m.Loss})
	tr := steptest.Open(t, dir)
	r := rand.New(rand.NewPCG(9, 9))
	var first, last float64
	const steps = 600
	for step := 0; step < steps; step++ {
		l := tr.Step(newBatch(r, c, 16).feeds(t, c.SeqLen), 1e-2)
		if step == 0 {
			first = l
		}
		last = l
	}
	ev := tr.Eval(newBatch(r, c, 64).feeds(t, c.SeqLen))
	t.Logf("tiny LM (%d parameters): loss %.3f at step 1, %.3f at step %d, eval %.3f", m.ParamCount, first, last, steps, ev)
	if !(last < first/2) || !(ev < first/2) {
		t.Errorf("loss %.3f -> %.3f (eval %.3f), want it halved", first, last, ev)
	}
}

// TestPieceSizes: the automatic split of the loss keeps one sequence's piece
// within PieceLogits (2^22) logits: GPT-2's vocabulary on the preset's 512
// tokens takes 7 pieces (74 + 6 × 73 positions), on 1024 tokens 13; a
// small vocabulary one piece; loss_pieces sets the count, at most seq_len.
func TestPieceSizes(t *testing.T) {
	d := diffusionlm.Default()
	d.SeqLen = 512
	if got, want := d.PieceSizes(), []int64{74, 73, 73, 73, 73, 73, 73}; !slices.Equal(got, want) {
		t.Errorf("512 tokens: pieces %v, want %v", got, want)
	}
	for _, L := range []int{512, 1024, 100} {
		d.SeqLen = L
		var sum int64
		for _, p := range d.PieceSizes() {
			sum += p
			if p*int64(d.Vocab) > diffusionlm.PieceLogits {
				t.Errorf("%d tokens: a piece of %d positions holds %d logits per sequence, over %d", L, p, p*int64(d.Vocab), diffusionlm.PieceLogits)
			}
		}
		if sum != int64(L) {
			t.Errorf("%d tokens: pieces %v add up to %d", L, d.PieceSizes(), sum)
		}
	}
	if d.SeqLen = 1024; len(d.PieceSizes()) != 13 {
		t.Errorf("1024 tokens: %d pieces, want 13", len(d.PieceSizes()))
	}
	if got := tiny().PieceSizes(); !slices.Equal(got, []int64{8}) {
		t.Errorf("tiny: pieces %v, want one of 8", got)
	}
	c := tiny()
	c.LossPieces = 3
	if got := c.PieceSizes(); !slices.Equal(got, []int64{3, 3, 2}) {
		t.Errorf("loss_pieces 3 of 8: %v, want [3 3 2]", got)
	}
	c.LossPieces = 9
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "loss_pieces 9") {
		t.Errorf("loss_pieces 9 over seq_len 8: %v, want an error naming it", err)
	}
}
