package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/diffusionlm"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data/tokens"
)

// SamplerOptions say which checkpoint NewSampler loads.
type SamplerOptions struct {
	// Checkpoint is a checkpoint directory, a run's version directory or
	// "last" (with Config naming the run).
	Checkpoint string
	// Config replaces the checkpoint's configuration; nil keeps it, with
	// Sets applied on top.
	Config  *config.Config
	Sets    []string
	Session ort.Options
}

// Decoding says how Sample draws tokens.
type Decoding struct {
	// Steps is the number of denoising steps per block; 0 means the
	// block's length (one position revealed per step on average).
	Steps int
	// Temperature divides the logits before sampling; 0 takes the most
	// likely token (greedy).
	Temperature float64
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP (nucleus sampling); 1 keeps all.
	TopP float64
	Seed uint64
}

// Check reports the first setting Sample cannot use, as bad input.
func (d Decoding) Check() error {
	bad := func(format string, args ...any) error {
		return &InputError{Err: fmt.Errorf(format, args...)}
	}
	switch {
	case d.Steps < 0:
		return bad("--steps %d: each block needs at least one denoising step", d.Steps)
	case d.Temperature < 0 || math.IsNaN(d.Temperature) || math.IsInf(d.Temperature, 0):
		return bad("--temperature %v: want 0 (greedy) or a positive number", d.Temperature)
	case !(d.TopP > 0 && d.TopP <= 1):
		return bad("--top-p %v: want a probability in (0, 1]", d.TopP)
	}
	return nil
}

// Generation is one sampled answer.
type Generation struct {
	Prompt string `json:"prompt"`
	// Plan is HDP-Diffusion's plan segment (models trained with
	// data.tokens.segments), up to its end of text.
	Plan string `json:"plan,omitempty"`
	// Text is the answer (BD3-LM) or the execution segment (HDP), up to its
	// end of text.
	Text string `json:"text"`
	// Final is the answer after the text's "####" line, as GSM8K scores it.
	Final string `json:"final,omitempty"`
	// Expected and Correct are set by ExactMatch: the reference's final
	// answer and whether Final equals it.
	Expected string `json:"expected,omitempty"`
	Correct  bool   `json:"correct,omitempty"`
	// NotGenerated says why ExactMatch could not ask the model (a question
	// longer than the model's question positions): scored as wrong.
	NotGenerated string `json:"not_generated,omitempty"`
	// Tokens are the generated ids of the blocks denoised, in order.
	Tokens []int64 `json:"tokens"`
	// Blocks is the number of blocks denoised and ModelRuns the model
	// evaluations they took (a step that reveals nothing reuses the last).
	Blocks    int     `json:"blocks"`
	ModelRuns int     `json:"model_runs"`
	Seconds   float64 `json:"seconds"`
	// TokensPerSecond counts the text's tokens (plan and text, each with
	// its end of text), not the padding denoised after it.
	TokensPerSecond float64 `json:"tokens_per_s"`
}

// Sampler generates text with a trained bd3lm checkpoint through its eval
// graph.
type Sampler struct {
	lc     *loadedCheckpoint
	sess   *ort.Session
	inputs map[string]*ort.Value
	tok    *tokens.Tokenizer
	lm     diffusionlm.Config
	// segments is true for HDP-Diffusion's layout: question, plan and
	// execution are one block each, and every block after the question is
	// generated; with BD3-LM's layout generation stops at end of text.
	segments       bool
	ownsCheckpoint bool
}

// NewSampler loads the checkpoint o names; it must be of the bd3lm recipe.
func NewSampler(o SamplerOptions) (*Sampler, error) {
	lc, err := openCheckpoint(o.Checkpoint, o.Config, o.Sets, o.Session)
	if err != nil {
		return nil, err
	}
	s, err := newSampler(lc, o.Session)
	if err != nil {
		lc.close()
		return nil, err
	}
	s.ownsCheckpoint = true
	return s, nil
}

// newSampler samples with a loaded checkpoint, which stays the caller's.
func newSampler(lc *loadedCheckpoint, session ort.Options) (*Sampler, error) {
	s := &Sampler{lc: lc, inputs: map[string]*ort.Value{}, segments: len(lc.cfg.Data.Tokens.Segments) > 0}
	if err := s.open(session); err != nil {
		s.Close()
		return nil, err
	}
	// One untimed model run first: the session's first run sets up its
	// kernels and arenas, which would otherwise count against the first
	// prompt's tokens/s.
	if _, err := s.Sample("Warm up.", Decoding{Steps: 1, TopP: 1}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sampler) open(session ort.Options) error {
	cfg := s.lc.cfg
	if cfg.Model.Recipe != "bd3lm" {
		what := "the ONNX model in model.artifacts"
		if cfg.Model.Recipe != "" {
			what = "the " + cfg.Model.Recipe + " recipe"
		}
		return &InputError{File: s.lc.ck.Dir, Err: fmt.Errorf("sampling text needs a checkpoint of the bd3lm recipe; this run trains %s", what)}
	}
	var err error
	if s.lm, err = models.LMConfig(cfg.Model.Params); err != nil {
		return err
	}
	if s.lm.Vocab <= tokens.EndOfText {
		return &InputError{File: s.lc.ck.Dir, Err: fmt.Errorf("the model's vocabulary of %d does not hold GPT-2's tokens (end of text is %d)", s.lm.Vocab, tokens.EndOfText)}
	}
	if s.sess, err = ort.NewSession(filepath.Join(s.lc.dir, s.lc.m.Files["eval"]), session); err != nil {
		return err
	}
	for _, n := range weightNames(s.lc.m) {
		if s.inputs[n], err = s.lc.weights(n); err != nil {
			return err
		}
	}
	s.tok, err = tokens.GPT2()
	return err
}

// Close releases the session and the checkpoint.
func (s *Sampler) Close() {
	for _, v := range s.inputs {
		v.Close()
	}
	if s.sess != nil {
		s.sess.Close()
	}
	if s.ownsCheckpoint {
		s.lc.close()
	}
}

// Checkpoint is the checkpoint directory loaded, Step its training step.
func (s *Sampler) Checkpoint() string { return s.lc.ck.Dir }
func (s *Sampler) Step() int64        { return s.lc.ck.State.Step }

// BlockSize is the diffusion block length the model was trained with, 0
// for HDP-Diffusion's segments (whose blocks differ in length).
func (s *Sampler) BlockSize() int {
	if s.segments || len(s.lm.Blocks) > 0 {
		return 0
	}
	return s.lm.BlockSize
}

// Sample answers prompt as BD3-LM samples: block after block, each from all
// masks, given the clean earlier blocks (the model's x_0 half, which its
// attention mask lets a block see). A block is denoised over d.Steps steps
// of the noise level from 1 down to 0 with ancestral updates of the linear
// schedule: going from t to s, each still masked position is revealed with
// probability (t − s)/t (so the last step reveals the rest), its token
// drawn from the model's x_0 prediction; revealed tokens stay. The prompt
// is laid out as training laid out questions: from position 0, the answer
// starting at the next block. For BD3-LM generation ends with the block
// where end of text appears; for HDP the plan and execution blocks are both
// generated.
func (s *Sampler) Sample(prompt string, d Decoding) (*Generation, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	start := time.Now()
	of := s.lm.BlockOf()
	L := len(of)
	ids := s.tok.Encode(nil, prompt)
	if len(ids) == 0 {
		return nil, &InputError{Err: errors.New("the prompt is empty")}
	}
	lastBlock := of[L-1]
	switch {
	case s.segments && (len(ids) > L || of[len(ids)-1] != 0):
		return nil, &InputError{Err: fmt.Errorf("the prompt is %d tokens; the model's question segment holds %d", len(ids), s.lc.cfg.Data.Tokens.Segments[0])}
	case len(ids) > L || of[len(ids)-1] == lastBlock:
		return nil, &InputError{Err: fmt.Errorf("the prompt is %d tokens, which leaves no block of the model's %d positions to generate", len(ids), L)}
	}
	x0 := make([]int64, L)
	for i := range x0 {
		x0[i] = tokens.EndOfText
	}
	copy(x0, ids)
	rng := rand.New(rand.NewPCG(d.Seed, 0x5a3))
	g := &Generation{Prompt: prompt}
	var answers [][]int64 // each generated block's ids up to end of text
	for b := of[len(ids)-1] + 1; b <= lastBlock; b++ {
		lo := slices.Index(of, b)
		hi := lo
		for hi < L && of[hi] == b {
			hi++
		}
		if err := s.denoise(x0, lo, hi, d, rng, g); err != nil {
			return nil, err
		}
		g.Blocks++
		g.Tokens = append(g.Tokens, x0[lo:hi]...)
		block := x0[lo:hi]
		end := slices.Index(block, tokens.EndOfText)
		if s.segments {
			if end < 0 {
				end = len(block)
			}
			answers = append(answers, block[:end])
			continue
		}
		if len(answers) == 0 {
			answers = append(answers, nil)
		}
		if end >= 0 {
			answers[0] = append(answers[0], block[:end]...)
			break
		}
		answers[0] = append(answers[0], block...)
	}
	n := 0
	for _, a := range answers {
		n += len(a) + 1
	}
	if len(answers) > 1 {
		g.Plan = s.tok.Decode(answers[0])
	}
	g.Text = s.tok.Decode(answers[len(answers)-1])
	g.Final, _ = tokens.FinalAnswer(g.Text)
	g.Seconds = time.Since(start).Seconds()
	if g.Seconds > 0 {
		g.TokensPerSecond = float64(n) / g.Seconds
	}
	return g, nil
}

// denoise generates positions [lo, hi) of x0 from all masks.
func (s *Sampler) denoise(x0 []int64, lo, hi int, d Decoding, rng *rand.Rand, g *Generation) error {
	mask := int64(s.lm.MaskToken)
	xt := slices.Clone(x0)
	for p := lo; p < hi; p++ {
		xt[p] = mask
	}
	steps := d.Steps
	if steps == 0 {
		steps = hi - lo
	}
	var logits []float32
	vocab := 0
	changed := true
	for step := range steps {
		if changed {
			var err error
			if logits, vocab, err = s.predict(xt, lo, hi); err != nil {
				return err
			}
			g.ModelRuns++
			changed = false
		}
		// From t = 1 − step/steps to s = t − 1/steps: (t − s)/t.
		reveal := 1 / float64(steps-step)
		for p := lo; p < hi; p++ {
			if xt[p] != mask || (step < steps-1 && rng.Float64() >= reveal) {
				continue
			}
			xt[p] = pick(logits[p*vocab:(p+1)*vocab], mask, d, rng)
			changed = true
		}
	}
	copy(x0[lo:hi], xt[lo:hi])
	return nil
}

// predict runs the model on x_t, whose positions [lo, hi) are the block
// being denoised, and returns its logits [L, vocab]. The model does not
// read the noise level (it only weights the loss), so t is 1 everywhere;
// x_0 is x_t with the block's masks, which no earlier position reads.
func (s *Sampler) predict(xt []int64, lo, hi int) ([]float32, int, error) {
	L := int64(len(xt))
	tt := make([]float32, L)
	lossMask := make([]uint8, L)
	for i := range tt {
		tt[i] = 1
	}
	for p := lo; p < hi; p++ {
		lossMask[p] = 1
	}
	shape := []int64{1, L}
	feeds := map[string]func() (*ort.Value, error){
		diffusionlm.NoisyIDs: func() (*ort.Value, error) { return ort.NewTensor(shape, xt) },
		diffusionlm.InputIDs: func() (*ort.Value, error) { return ort.NewTensor(shape, xt) },
		diffusionlm.T:        func() (*ort.Value, error) { return ort.NewTensor(shape, tt) },
		diffusionlm.LossMask: func() (*ort.Value, error) { return ort.NewTensor(shape, lossMask) },
	}
	defer func() {
		for name := range feeds {
			if v := s.inputs[name]; v != nil {
				v.Close()
				delete(s.inputs, name)
			}
		}
	}()
	for name, make := range feeds {
		v, err := make()
		if err != nil {
			return nil, 0, err
		}
		s.inputs[name] = v
	}
	outs, err := s.sess.Run(s.inputs, diffusionlm.Logits)
	if err != nil {
		return nil, 0, err
	}
	defer outs[0].Close()
	got := outs[0].Shape()
	if len(got) != 3 || got[0] != 1 || got[1] != L {
		return nil, 0, fmt.Errorf("sample: the model's logits are %v, want [1, %d, vocab]", got, L)
	}
	return slices.Clone(ort.Data[float32](outs[0])), int(got[2]), nil
}

// pick draws a token from one position's logits, never the mask token.
func pick(logits []float32, mask int64, d Decoding, rng *rand.Rand) int64 {
	best := -1
	for i, v := range logits {
		if int64(i) != mask && (best < 0 || v > logits[best]) {
			best = i
		}
	}
	if d.Temperature == 0 {
		return int64(best)
	}
	// Probabilities at the temperature, most likely first.
	type cand struct {
		id int
		p  float64
	}
	cands := make([]cand, 0, len(logits))
	var sum float64
	for i, v := range logits {
		if int64(i) == mask {
			continue
		}
		p := math.Exp((float64(v) - float64(logits[best])) / d.Temperature)
		if p > 0 {
			cands = append(cands, cand{i, p})
			sum += p
		}
	}
	if d.TopP < 1 {
		sort.Slice(cands, func(a, b int) bool {
			if cands[a].p != cands[b].p {
				return cands[a].p > cands[b].p
			}
			return cands[a].id < cands[b].id
		})
		var kept float64
		for k, c := range cands {
			kept += c.p
			if kept >= d.TopP*sum {
				cands = cands[:k+1]
				break
			}
		}
		sum = kept
	}
	r := rng.Float64() * sum
	for _, c := range cands {
		if r -= c.p; r < 0 {
			return int64(c.id)
		}
	}
	return int64(cands[len(cands)-1].id)
}

// ExactMatch is GSM8K's accuracy of generated answers: the share of
// examples whose generated final answer (FinalAnswer of the text) equals
// the reference's, as strings after the same normalisation.
func ExactMatch(ctx context.Context, s *Sampler, examples []tokens.Example, d Decoding, progress func(done, correct int)) (float64, []Generation, error) {
	if len(examples) == 0 {
		return 0, nil, &InputError{Err: errors.New("no examples to generate answers for")}
	}
	gens := make([]Generation, 0, len(examples))
	correct := 0
	for i, e := range examples {
		if err := ctx.Err(); err != nil {
			return 0, nil, err
		}
		g, err := s.Sample(e.Question, d)
		var ie *InputError
		if errors.As(err, &ie) {
			// A question the model cannot take counts against it, as a
			// wrong answer would: accuracy stays over every question.
			g, err = &Generation{Prompt: e.Question, NotGenerated: ie.Err.Error()}, nil
		}
		if err != nil {
			return 0, nil, fmt.Errorf("example %d: %w", i+1, err)
		}
		g.Expected, _ = tokens.FinalAnswer(e.Answer)
		g.Correct = g.NotGenerated == "" && g.Final != "" && g.Final == g.Expected
		if g.Correct {
			correct++
		}
		gens = append(gens, *g)
		if progress != nil {
			progress(i+1, correct)
		}
	}
	return float64(correct) / float64(len(examples)), gens, nil
}
