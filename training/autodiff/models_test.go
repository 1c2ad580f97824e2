package autodiff_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// The two model families issue 4 is for, built small with the builder and
// trained on the CPU: a 3D conv autoencoder with a VQ bottleneck (VQ-GAN's
// generator without the GAN), and a causal transformer block (the core of
// a diffusion transformer or a GPT).

// net is a model under construction: parameters are graph inputs with
// random initial values, so the test can feed them updated each step.
type net struct {
	g      *graph.Graph
	b      *graph.Builder
	r      *rand.Rand
	params []string
	init   map[string][]float32
}

func newNet(seed uint64) *net {
	g := graph.New("model", graph.EmitOpset)
	return &net{g: g, b: graph.NewBuilder(g, ""), r: rand.New(rand.NewPCG(seed, 3)), init: map[string][]float32{}}
}

// param adds a float32 parameter drawn from N(mean, std²).
func (m *net) param(name string, std, mean float64, shape ...int64) string {
	m.g.AddInput(name, graph.Info{DType: ort.Float32, Known: true, Shape: shape})
	v := make([]float32, ort.Numel(shape))
	for i := range v {
		v[i] = float32(mean + std*m.r.NormFloat64())
	}
	m.params = append(m.params, name)
	m.init[name] = v
	return name
}

func (m *net) silu(x string) string { return m.b.Mul(x, m.b.Sigmoid(x)) }

func (m *net) mse(a, c string) string {
	d := m.b.Sub(a, c)
	return m.b.ReduceMean(m.b.Mul(d, d), false)
}

// session differentiates loss with respect to every parameter, adds the
// extra outputs, strips the stop-gradient markers and opens the graph.
func (m *net) session(t *testing.T, loss string, extra ...string) (*ort.Session, []string) {
	t.Helper()
	grads, err := autodiff.Gradients(m.g, loss, m.params, "grad/")
	if err != nil {
		t.Fatal(err)
	}
	m.g.Outputs = append([]string{loss}, extra...)
	var gs []string
	for _, p := range m.params {
		gs = append(gs, grads[p])
	}
	m.g.Outputs = append(m.g.Outputs, gs...)
	m.g.Prune()
	m.g.StripStopGradients()
	bytes, err := m.g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	orttest.Init(t)
	sess, err := ort.NewSessionFromBytes(bytes, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sess.Close)
	return sess, gs
}

// train runs Adam (lr, betas 0.9/0.999) for steps and returns the losses.
func (m *net) train(t *testing.T, sess *ort.Session, data map[string]*ort.Value, nExtra, steps int, lr float64) []float64 {
	t.Helper()
	w := map[string][]float32{}
	mom, vel := map[string][]float64{}, map[string][]float64{}
	for _, p := range m.params {
		w[p] = append([]float32(nil), m.init[p]...)
		mom[p], vel[p] = make([]float64, len(w[p])), make([]float64, len(w[p]))
	}
	var losses []float64
	for step := 1; step <= steps; step++ {
		feed := map[string]*ort.Value{}
		for k, v := range data {
			feed[k] = v
		}
		for _, p := range m.params {
			v, err := ort.NewTensor(m.g.Info(p).Shape, w[p])
			if err != nil {
				t.Fatal(err)
			}
			feed[p] = v
		}
		outs, err := sess.Run(feed)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, values(outs[0])[0])
		for i, p := range m.params {
			gr := ort.Data[float32](outs[1+nExtra+i])
			for k := range w[p] {
				g := float64(gr[k])
				mom[p][k] = 0.9*mom[p][k] + 0.1*g
				vel[p][k] = 0.999*vel[p][k] + 0.001*g*g
				mh, vh := mom[p][k]/(1-math.Pow(0.9, float64(step))), vel[p][k]/(1-math.Pow(0.999, float64(step)))
				w[p][k] -= float32(lr * mh / (math.Sqrt(vh) + 1e-8))
			}
		}
		for _, o := range outs {
			o.Close()
		}
		for _, p := range m.params {
			feed[p].Close()
		}
	}
	return losses
}

func f32Input(t *testing.T, shape []int64, v []float32) *ort.Value {
	val, err := ort.NewTensor(shape, v)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { val.Close() })
	return val
}

// vqAutoencoder builds encoder → VQ → decoder on (2, 1, 8, 8, 8) volumes:
// a strided Conv3d, GroupNorm as PyTorch exports it, SiLU; a 16-code
// codebook picked by ArgMin over distances; the straight-through estimator
// st = z + sg(q - z); a decoder with a nearest Resize + Conv3d and a
// ConvTranspose3d in parallel.
// It returns the reconstruction, codebook and commitment losses and the
// values z, st.
func vqAutoencoder(m *net) (rec, cb, commit, z, st string) {
	b := m.b
	m.g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2, 1, 8, 8, 8}})
	pad1 := graph.AInts("pads", []int64{1, 1, 1, 1, 1, 1})
	h := b.Op("Conv", []string{"x", m.param("enc1.w", 0.3, 0, 8, 1, 3, 3, 3), m.param("enc1.b", 0, 0, 8)}, pad1, graph.AInts("strides", []int64{2, 2, 2}))
	h = m.silu(b.GroupNorm(h, m.param("gn.w", 0, 1, 8), m.param("gn.b", 0, 0, 8), 2, 1e-5))
	zc := b.Op("Conv", []string{h, m.param("enc2.w", 0.3, 0, 4, 8, 1, 1, 1)}) // (2, 4, 4, 4, 4)
	z = b.Reshape(b.Transpose(zc, 0, 2, 3, 4, 1), b.Ints(-1, 4))              // (128, 4)
	e := m.param("codebook", 0.5, 0, 16, 4)
	dist := b.Add(b.Sub(b.ReduceSum(b.Mul(z, z), true, 1), b.Mul(b.Scalar(ort.Float32, 2), b.MatMul(z, b.Transpose(e, 1, 0)))),
		b.Transpose(b.ReduceSum(b.Mul(e, e), true, 1), 1, 0))
	q := b.Gather(e, b.ArgMin(dist, 1, false), 0)
	st = b.Add(z, b.StopGradient(b.Sub(q, z)))
	cb, commit = m.mse(q, b.StopGradient(z)), m.mse(z, b.StopGradient(q))
	s5 := b.Transpose(b.Reshape(st, b.Ints(2, 4, 4, 4, 4)), 0, 4, 1, 2, 3)
	scales := b.Const(graph.Float32s("", []int64{5}, []float32{1, 1, 2, 2, 2}))
	up := b.Op("Resize", []string{s5, "", scales}, graph.AString("mode", "nearest"),
		graph.AString("coordinate_transformation_mode", "asymmetric"), graph.AString("nearest_mode", "floor"))
	u1 := b.Op("Conv", []string{up, m.param("dec1.w", 0.2, 0, 4, 4, 3, 3, 3)}, pad1)
	u2 := b.Op("ConvTranspose", []string{s5, m.param("dect.w", 0.2, 0, 4, 4, 4, 4, 4), m.param("dect.b", 0, 0, 4)},
		graph.AInts("strides", []int64{2, 2, 2}), pad1)
	y := b.Op("Conv", []string{m.silu(b.Add(u1, u2)), m.param("dec2.w", 0.2, 0, 1, 4, 3, 3, 3), m.param("dec2.b", 0, 0, 1)}, pad1)
	return m.mse(y, "x"), cb, commit, z, st
}

func volumes() []float32 {
	v := make([]float32, 2*8*8*8)
	for i := range v {
		n, d, h, w := i/512, i/64%8, i/8%8, i%8
		v[i] = float32(math.Sin(0.7*float64(d+n)) * math.Cos(0.5*float64(h)-0.3*float64(w*(n+1))))
	}
	return v
}

// TestVQAutoencoderTrains: the total loss falls under Adam, and the
// straight-through and stop-gradient structure holds: the reconstruction
// loss's gradient reaches the encoder through the quantiser unchanged
// (d rec/d z = d rec/d st, nonzero) and none of it reaches the codebook;
// the codebook's gradient is its own loss's alone; the codebook loss sends
// nothing to the encoder. Exact zeros and equalities are expected (the
// cut paths emit no nodes; z and st differ by an Add of a cut value), so
// the comparisons use 1e-7, float32 rounding of the one Sum of
// fan-out gradients.
func TestVQAutoencoderTrains(t *testing.T) {
	m := newNet(1)
	rec, cb, commit, z, st := vqAutoencoder(m)
	b := m.b
	total := b.Add(b.Add(rec, cb), b.Mul(commit, b.Scalar(ort.Float32, 0.25)))
	check := map[string]map[string]string{}
	for name, l := range map[string]string{"rec": rec, "cb": cb, "commit": commit, "total": total} {
		gs, err := autodiff.Gradients(m.g, l, []string{z, st, "codebook", "enc1.w"}, "check/"+name+"/")
		if err != nil {
			t.Fatal(err)
		}
		check[name] = gs
	}
	extra := []string{check["rec"][z], check["rec"][st], check["rec"]["codebook"], check["cb"]["codebook"],
		check["total"]["codebook"], check["rec"]["enc1.w"], check["cb"]["enc1.w"]}
	sess, _ := m.session(t, total, extra...)
	xv := f32Input(t, []int64{2, 1, 8, 8, 8}, volumes())
	feed := map[string]*ort.Value{"x": xv}
	for _, p := range m.params {
		feed[p] = f32Input(t, m.g.Info(p).Shape, m.init[p])
	}
	outs, err := sess.Run(feed)
	if err != nil {
		t.Fatal(err)
	}
	get := func(i int) []float64 { return values(outs[1+i]) }
	dz, dst, recCB, cbCB, totCB, recEnc, cbEnc := get(0), get(1), get(2), get(3), get(4), get(5), get(6)
	for _, o := range outs {
		o.Close()
	}
	if maxAbs(dz) == 0 || maxAbs(recEnc) == 0 {
		t.Fatalf("no reconstruction gradient reaches z (max %g) or the encoder (max %g)", maxAbs(dz), maxAbs(recEnc))
	}
	if d := maxDiff(dz, dst); d > 1e-7 {
		t.Errorf("d rec/d z differs from d rec/d st by %g: the quantiser is not straight-through", d)
	}
	if maxAbs(recCB) != 0 {
		t.Errorf("the reconstruction loss reaches the codebook (max |grad| %g)", maxAbs(recCB))
	}
	if maxAbs(cbEnc) != 0 {
		t.Errorf("the codebook loss reaches the encoder (max |grad| %g)", maxAbs(cbEnc))
	}
	if maxAbs(cbCB) == 0 || maxDiff(cbCB, totCB) > 1e-7 {
		t.Errorf("codebook gradient of the total loss differs from its own loss's by %g", maxDiff(cbCB, totCB))
	}

	losses := m.train(t, sess, map[string]*ort.Value{"x": xv}, len(extra), 60, 0.01)
	first, last := losses[0], losses[len(losses)-1]
	t.Logf("VQ autoencoder loss %.4f -> %.4f in %d steps", first, last, len(losses))
	if !(last < 0.5*first) {
		t.Errorf("loss fell only from %g to %g", first, last)
	}
}

func maxAbs(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, math.Abs(x))
	}
	return m
}

func maxDiff(a, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

// TestTransformerBlockTrains: token and position embeddings (Gather), a
// pre-norm causal self-attention block (LayerNormalization, one QKV
// MatMul Split three ways, heads by Reshape/Transpose, scores by Einsum,
// the causal mask by Where, Softmax), a GELU MLP with training-mode
// Dropout, tied output embedding, next-token cross-entropy on Sliced
// logits. It memorises two sequences: the loss falls below a fifth.
func TestTransformerBlockTrains(t *testing.T) {
	const bs, seq, d, heads, vocab = 2, 6, 16, 2, 11
	m := newNet(2)
	b := m.b
	tokens := []int64{1, 4, 7, 2, 9, 3, 5, 5, 8, 10, 0, 6}
	tok := b.Const(graph.Int64s("", []int64{bs, seq}, tokens))
	emb := m.param("emb", 0.3, 0, vocab, d)
	h := b.Add(b.Gather(emb, tok, 0), m.param("pos", 0.1, 0, seq, d))
	ln := func(x, name string) string {
		return b.LayerNorm(x, m.param(name+".w", 0, 1, d), m.param(name+".b", 0, 0, d), -1, 1e-5)
	}
	qkv := b.OpN("Split", []string{b.MatMul(ln(h, "ln1"), m.param("qkv", 0.2, 0, d, 3*d))}, 3, graph.AInt("axis", -1))
	split := func(x string) string {
		return b.Transpose(b.Reshape(x, b.Ints(bs, seq, heads, d/heads)), 0, 2, 1, 3)
	}
	scores := b.Div(b.Einsum("bhqd,bhkd->bhqk", split(qkv[0]), split(qkv[1])), b.Scalar(ort.Float32, math.Sqrt(d/heads)))
	causal := make([]bool, seq*seq)
	for i := range seq {
		for j := 0; j <= i; j++ {
			causal[i*seq+j] = true
		}
	}
	att := b.Softmax(b.Where(boolConst(b, []int64{seq, seq}, causal...), scores, b.Scalar(ort.Float32, -1e9)), -1)
	o := b.Reshape(b.Transpose(b.MatMul(att, split(qkv[2])), 0, 2, 1, 3), b.Ints(bs, seq, d))
	h = b.Add(h, b.MatMul(o, m.param("proj", 0.2, 0, d, d)))
	mlp := b.Gelu(b.Add(b.MatMul(ln(h, "ln2"), m.param("fc1", 0.2, 0, d, 4*d)), m.param("fc1.b", 0, 0, 4*d)))
	mlp = b.Op("Dropout", []string{mlp, b.Scalar(ort.Float32, 0.1), boolConst(b, nil, true)})
	h = b.Add(h, b.MatMul(mlp, m.param("fc2", 0.1, 0, 4*d, d)))
	logits := b.MatMul(ln(h, "lnf"), b.Transpose(emb, 1, 0))
	logp := b.Op("LogSoftmax", []string{b.Slice(logits, []int64{0}, []int64{seq - 1}, []int64{1}, nil)}, graph.AInt("axis", -1))
	onehot := make([]float32, bs*(seq-1)*vocab)
	for n := range bs {
		for i := range seq - 1 {
			onehot[(n*(seq-1)+i)*vocab+int(tokens[n*seq+i+1])] = 1
		}
	}
	target := b.Const(graph.Float32s("", []int64{bs, seq - 1, vocab}, onehot))
	loss := b.Neg(b.ReduceMean(b.ReduceSum(b.Mul(logp, target), false, -1), false))
	sess, _ := m.session(t, loss)
	losses := m.train(t, sess, nil, 0, 80, 0.01)
	first, last := losses[0], losses[len(losses)-1]
	t.Logf("transformer block loss %.4f -> %.4f in %d steps", first, last, len(losses))
	if !(last < 0.2*first) {
		t.Errorf("loss fell only from %g to %g", first, last)
	}
}
