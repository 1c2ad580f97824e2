// Package diffusionlm builds the forward graph, with its training loss, of a
// block-diffusion transformer language model in the style of BD3-LM
// (Arriola et al. 2025) and HDP-Diffusion: a masked-diffusion LM that
// denoises one block at a time, each block conditioned on the clean blocks
// before it.
//
// Training follows BD3-LM's vectorised form: the noised sequence x_t and the
// clean sequence x_0 run through the transformer together as one sequence of
// 2L tokens, under an attention mask that lets
//
//   - a noised token attend to the noised tokens of its own block
//     (bidirectional within the block),
//   - a noised token attend to the clean tokens of earlier blocks,
//   - a clean token attend to the clean tokens of its own and earlier
//     blocks (block-causal),
//
// so one pass yields, for every block, the prediction of x_0 from that
// block's noise and the clean past. The mask is a constant of the graph
// (blocks are fixed: BlockSize, or the Blocks segment lengths for
// HDP-Diffusion's question/plan/execution layout).
//
// Network: token embedding tok_emb (vocabulary 50258 = GPT-2's 50257 + the
// mask token 50257), learned position embedding pos_emb (or a fixed
// sinusoidal table), Layers pre-norm blocks (ln1 → multi-head attention with
// separate q, k, v and out projections → residual; ln2 → mlp fc1, exact
// GELU, fc2 → residual), final LayerNorm ln_f, and an output projection
// tied to tok_emb by default (GPT-2's choice; lm_head otherwise). There is
// no time conditioning, as in BD3-LM. The mask token's logit is pushed to
// −1e9 so the model never predicts it (MDLM's SUBS parameterisation).
//
// Loss (scalar output "loss"), BD3-LM's NELBO for the linear schedule:
// Σ over masked positions of −log p(x_0 | x_t) / t, divided by the number of
// positions to predict (loss_mask's sum). −log p is read from
// LogSoftmax(logits) at x_0 (GatherElements: no one-hot of the vocabulary is
// built), over the sequence in pieces (LossPieces) so that no tensor of a
// training step exceeds what CUDA kernels take.
//
// The inputs are named as training/data/tokens produces them with noise on.
package diffusionlm

import (
	"fmt"
	"math"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models/internal/nn"
	"github.com/ortrain/ortrain/training/graph"
)

// Names of the graph's inputs (all [batch, SeqLen]) and outputs.
const (
	// NoisyIDs is x_t (int64): the sequence with masked positions set to
	// the mask token.
	NoisyIDs = "noisy_ids"
	// InputIDs is x_0 (int64), the clean sequence and target.
	InputIDs = "input_ids"
	// T is the noise level of each position's block (float32), in (0, 1);
	// the loss weight of a masked position is 1/t.
	T = "t"
	// LossMask is 1 on the positions to predict (uint8); its sum divides
	// the loss.
	LossMask = "loss_mask"
	// Loss is the scalar training loss.
	Loss = "loss"
	// Logits are the x_0 predictions for the noised positions, float32
	// [batch, SeqLen, Vocab].
	Logits = "logits"
)

// Inputs lists the data inputs in order.
var Inputs = []string{NoisyIDs, InputIDs, T, LossMask}

// Config sizes the model; toml tags are the [model.params] names.
type Config struct {
	// Vocab is the vocabulary size, mask token included.
	Vocab int `toml:"vocab"`
	// MaskToken is the id of the mask token.
	MaskToken int `toml:"mask_token"`
	// Hidden is the model width.
	Hidden int `toml:"hidden"`
	// Layers is the number of transformer blocks.
	Layers int `toml:"layers"`
	// Heads is the number of attention heads; it must divide Hidden.
	Heads int `toml:"heads"`
	// MLPRatio is the MLP's hidden width over Hidden.
	MLPRatio int `toml:"mlp_ratio"`
	// SeqLen is the sequence length L.
	SeqLen int `toml:"seq_len"`
	// BlockSize is the diffusion block length; it must divide SeqLen.
	// Ignored when Blocks is set.
	BlockSize int `toml:"block_size"`
	// Blocks are explicit block lengths adding up to SeqLen (HDP-Diffusion:
	// [128, 128, 256] for question, plan, execution).
	Blocks []int `toml:"blocks"`
	// Positions is "learned" (pos_emb parameter) or "sinusoidal" (fixed).
	Positions string `toml:"positions"`
	// TieEmbeddings shares tok_emb as the output projection.
	TieEmbeddings bool `toml:"tie_embeddings"`
	// Seed draws the initial weights.
	Seed uint64 `toml:"seed"`
	// LossPieces is the number of pieces of the sequence over which the
	// output projection and its log-softmax run, each piece a
	// [batch × positions, Vocab] tensor (see PieceSizes); 0 picks enough
	// that one sequence's piece holds at most PieceLogits logits.
	LossPieces int `toml:"loss_pieces"`
}

// PieceLogits is the most logits one sequence contributes to a piece of
// the loss when LossPieces is 0: a piece then stays within 2^31 − 1
// elements, the most a CUDA kernel's int-sized tensor descriptor takes, up
// to a batch of 511 sequences.
const PieceLogits = 1 << 22

// PieceSizes are the lengths of the pieces of the sequence the loss is
// computed over, in order, adding up to SeqLen; as equal as they can be.
func (c Config) PieceSizes() []int64 {
	k := c.LossPieces
	if k <= 0 {
		k = int((int64(c.SeqLen)*int64(c.Vocab) + PieceLogits - 1) / PieceLogits)
	}
	k = max(1, min(k, c.SeqLen))
	sizes := make([]int64, k)
	for i := range sizes {
		sizes[i] = int64(c.SeqLen / k)
		if i < c.SeqLen%k {
			sizes[i]++
		}
	}
	return sizes
}

// Default is the BD3-LM small size: GPT-2 small's transformer (768 wide,
// 12 layers, 12 heads) on 1024 tokens in blocks of 16, learned positions,
// tied embeddings. ParamCount: 124,440,576, of which the transformer blocks
// are 85,054,464.
func Default() Config {
	return Config{Vocab: 50258, MaskToken: 50257, Hidden: 768, Layers: 12, Heads: 12, MLPRatio: 4,
		SeqLen: 1024, BlockSize: 16, Positions: "learned", TieEmbeddings: true}
}

// BlockOf returns, for each position, the index of its block.
func (c Config) BlockOf() []int {
	lens := c.Blocks
	if len(lens) == 0 {
		for i := 0; i < c.SeqLen/c.BlockSize; i++ {
			lens = append(lens, c.BlockSize)
		}
	}
	var of []int
	for bi, n := range lens {
		for range n {
			of = append(of, bi)
		}
	}
	return of
}

// Validate reports the first size or setting Build cannot use.
func (c Config) Validate() error {
	if c.Vocab < 2 || c.MaskToken < 0 || c.MaskToken >= c.Vocab {
		return fmt.Errorf("diffusionlm: mask_token %d is not inside vocab %d", c.MaskToken, c.Vocab)
	}
	if c.Hidden < 1 || c.Layers < 1 || c.Heads < 1 || c.MLPRatio < 1 || c.SeqLen < 1 {
		return fmt.Errorf("diffusionlm: hidden, layers, heads, mlp_ratio and seq_len must be >= 1")
	}
	if c.Hidden%c.Heads != 0 {
		return fmt.Errorf("diffusionlm: heads %d does not divide hidden %d", c.Heads, c.Hidden)
	}
	if len(c.Blocks) > 0 {
		sum := 0
		for _, n := range c.Blocks {
			if n < 1 {
				return fmt.Errorf("diffusionlm: block lengths %v must be >= 1", c.Blocks)
			}
			sum += n
		}
		if sum != c.SeqLen {
			return fmt.Errorf("diffusionlm: blocks %v add up to %d, not seq_len %d", c.Blocks, sum, c.SeqLen)
		}
	} else if c.BlockSize < 1 || c.SeqLen%c.BlockSize != 0 {
		return fmt.Errorf("diffusionlm: block_size %d does not divide seq_len %d", c.BlockSize, c.SeqLen)
	}
	if c.LossPieces < 0 || c.LossPieces > c.SeqLen {
		return fmt.Errorf("diffusionlm: loss_pieces %d must be between 0 (automatic) and seq_len %d", c.LossPieces, c.SeqLen)
	}
	if c.Positions != "learned" && c.Positions != "sinusoidal" {
		return fmt.Errorf("diffusionlm: positions %q is not learned or sinusoidal", c.Positions)
	}
	return nil
}

// BlockParams is the parameter count of one transformer block with width d
// and MLP width f: two LayerNorms (4d), q, k, v, out (4d² + 4d), fc1
// (d·f + f) and fc2 (f·d + d): 4d² + 2df + f + 9d (12d² + 13d at f = 4d).
func (c Config) BlockParams() int64 {
	d := int64(c.Hidden)
	f := d * int64(c.MLPRatio)
	return 4*d*d + 2*d*f + f + 9*d
}

// ParamCount is the closed-form number of trained scalars: Vocab·d
// (tok_emb) + [learned]·SeqLen·d (pos_emb) + Layers·BlockParams + 2d (ln_f)
// + [untied]·Vocab·d (lm_head, no bias).
func (c Config) ParamCount() int64 {
	d, V := int64(c.Hidden), int64(c.Vocab)
	n := V*d + int64(c.Layers)*c.BlockParams() + 2*d
	if c.Positions == "learned" {
		n += int64(c.SeqLen) * d
	}
	if !c.TieEmbeddings {
		n += V * d
	}
	return n
}

// AttentionMask is the additive [2L, 2L] mask over x_t ⊕ x_0 described in
// the package comment: 0 where attention is allowed, −1e9 elsewhere.
func (c Config) AttentionMask() []float32 {
	of := c.BlockOf()
	L := len(of)
	m := make([]float32, 4*L*L)
	for q := 0; q < 2*L; q++ {
		for k := 0; k < 2*L; k++ {
			bq, bk := of[q%L], of[k%L]
			var ok bool
			switch {
			case q < L && k < L: // noised → noised: own block
				ok = bq == bk
			case q < L: // noised → clean: earlier blocks
				ok = bk < bq
			case k >= L: // clean → clean: block-causal
				ok = bk <= bq
			}
			if !ok {
				m[q*2*L+k] = -1e9
			}
		}
	}
	return m
}

// sinusoid is the fixed [L, d] table sin/cos(p / 10000^(2i/d)).
func sinusoid(L, d int) []float32 {
	t := make([]float32, L*d)
	for p := 0; p < L; p++ {
		for i := 0; i < d; i++ {
			a := float64(p) / math.Pow(10000, float64(2*(i/2))/float64(d))
			if i%2 == 0 {
				t[p*d+i] = float32(math.Sin(a))
			} else {
				t[p*d+i] = float32(math.Cos(a))
			}
		}
	}
	return t
}

// Build returns the forward graph with the loss; inputs Inputs, outputs
// Loss and Logits.
func Build(c Config) (*graph.Graph, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	n := nn.New("bd3lm", c.Seed)
	b := n.B
	L, d, V := int64(c.SeqLen), int64(c.Hidden), int64(c.Vocab)
	H := int64(c.Heads)
	dh := d / H
	dims := []string{"batch", ""}
	xt := n.Input(NoisyIDs, dtype.Int64, []int64{-1, L}, dims)
	x0 := n.Input(InputIDs, dtype.Int64, []int64{-1, L}, dims)
	tt := n.Input(T, dtype.Float32, []int64{-1, L}, dims)
	lm := n.Input(LossMask, dtype.Uint8, []int64{-1, L}, dims)

	init := nn.Normal(0.02)
	// GPT-2 scales the projections that write into the residual stream by
	// 1/√(2·layers) so the stream's variance does not grow with depth.
	outInit := nn.Normal(0.02 / math.Sqrt(2*float64(c.Layers)))
	emb := n.Param("tok_emb.weight", []int64{V, d}, d, V, init)
	ids := b.Op("Concat", []string{xt, x0}, graph.AInt("axis", 1)) // [B, 2L]
	h := b.Op("Gather", []string{emb, ids}, graph.AInt("axis", 0)) // [B, 2L, d]
	pos := make([]int64, 2*L)
	for i := range pos {
		pos[i] = int64(i) % L
	}
	var pe string
	if c.Positions == "learned" {
		pe = b.Op("Gather", []string{n.Param("pos_emb.weight", []int64{L, d}, d, L, init), b.Ints(pos...)}, graph.AInt("axis", 0))
	} else {
		table := sinusoid(int(L), int(d))
		both := append(append([]float32{}, table...), table...)
		pe = n.Constant(graph.Float32s("", []int64{2 * L, d}, both))
	}
	h = b.Add(h, pe)
	mask := n.Constant(graph.Float32s("", []int64{2 * L, 2 * L}, c.AttentionMask()))
	scale := b.Scalar(dtype.Float32, 1/math.Sqrt(float64(dh)))
	heads := func(x string) string { // [B, 2L, d] -> [B, H, 2L, dh]
		return b.Transpose(b.Reshape(x, b.Ints(0, 2*L, H, dh)), 0, 2, 1, 3)
	}
	f := d * int64(c.MLPRatio)
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blocks.%d.", i)
		a := n.LayerNorm(p+"ln1", h, d)
		q := heads(n.Linear(p+"attn.q", a, d, d, true, init))
		k := heads(n.Linear(p+"attn.k", a, d, d, true, init))
		v := heads(n.Linear(p+"attn.v", a, d, d, true, init))
		s := b.Add(b.Mul(b.MatMul(q, b.SwapLast(k)), scale), mask)
		o := b.MatMul(b.Op("Softmax", []string{s}, graph.AInt("axis", -1)), v)
		o = b.Reshape(b.Transpose(o, 0, 2, 1, 3), b.Ints(0, 2*L, d))
		h = b.Add(h, n.Linear(p+"attn.out", o, d, d, true, outInit))
		m := n.GELU(n.Linear(p+"mlp.fc1", n.LayerNorm(p+"ln2", h, d), d, f, true, init))
		h = b.Add(h, n.Linear(p+"mlp.fc2", m, f, d, true, outInit))
	}
	h = n.LayerNorm("ln_f", h, d)
	// Only the noised half predicts.
	hx := b.Op("Slice", []string{h, b.Ints(0), b.Ints(L), b.Ints(1)}) // [B, L, d]
	out := emb
	if !c.TieEmbeddings {
		out = n.Param("lm_head.weight", []int64{V, d}, d, V, init)
	}
	never := make([]float32, V)
	never[c.MaskToken] = -1e9
	bias := n.Constant(graph.Float32s("", []int64{V}, never))
	// Logits, for the eval graph and the sampler, is one Gemm with the mask
	// token's bias over the flattened rows (a MatMul followed by an Add
	// would hold a second vocabulary-sized tensor: ONNX Runtime's Add does
	// not write in place). The training graph, which keeps only scalar
	// outputs, prunes it.
	rows := b.Op("Gemm", []string{b.Reshape(hx, b.Ints(-1, d)), out, bias}, graph.AInt("transB", 1))
	b.OpInto(Logits, "Reshape", []string{rows, b.Ints(-1, L, V)})

	// −log p(x_0) = −LogSoftmax(logits)[x_0], over the sequence in pieces
	// of positions, each piece its own Gemm: ONNX Runtime's CUDA provider
	// runs LogSoftmax over the last axis, and the Sum reductions of its
	// gradient, without cuDNN, whose tensor descriptors take no more than
	// 2^31 − 1 elements (the ReduceLogSumExp this replaces went through
	// cuDNN and failed at batch 128 × 512 × 50,258), and each piece keeps
	// the vocabulary-sized tensors of a step under that bound up to the
	// batch LossPieces says.
	var parts []string
	sizes := c.PieceSizes()
	pieces := []string{hx}
	targets := []string{x0}
	if len(sizes) > 1 {
		pieces = b.OpN("Split", []string{hx, b.Ints(sizes...)}, len(sizes), graph.AInt("axis", 1))
		targets = b.OpN("Split", []string{x0, b.Ints(sizes...)}, len(sizes), graph.AInt("axis", 1))
	}
	for i, p := range pieces {
		r := b.Op("Gemm", []string{b.Reshape(p, b.Ints(-1, d)), out, bias}, graph.AInt("transB", 1)) // [B·P, V]
		logp := b.Op("LogSoftmax", []string{r}, graph.AInt("axis", -1))
		at := b.Reshape(targets[i], b.Ints(-1, 1))
		parts = append(parts, b.Reshape(b.Op("GatherElements", []string{logp, at}, graph.AInt("axis", 1)), b.Ints(-1, sizes[i])))
	}
	logpx := parts[0]
	if len(parts) > 1 {
		logpx = b.Op("Concat", parts, graph.AInt("axis", 1))
	}
	nll := b.Neg(logpx) // [B, L]
	masked := b.Cast(b.Equal(xt, b.Const(graph.Int64s("", nil, []int64{int64(c.MaskToken)}))), dtype.Float32)
	num := b.ReduceSum(b.Div(b.Mul(nll, masked), tt), false)
	den := b.Max(b.ReduceSum(b.Cast(lm, dtype.Float32), false), b.Scalar(dtype.Float32, 1))
	b.OpInto(Loss, "Div", []string{num, den})
	n.G.Outputs = []string{Loss, Logits}
	if b.Err != nil {
		return nil, b.Err
	}
	return n.G, nil
}
