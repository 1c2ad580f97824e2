package tokens

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/ortrain/ortrain/training/data"
)

// Config lays out sequences. With Segments nil it is BD3-LM's layout:
// question, then the answer from the next multiple of BlockSize (so that no
// block mixes prompt and answer), then EndOfText, padded to SeqLen. With
// Segments set it is HDP-Diffusion's: question, plan and execution each
// truncated or padded to its own segment length (e.g. 128, 128, 256), which
// add up to SeqLen.
type Config struct {
	SeqLen    int
	BlockSize int
	Segments  []int
	// Noise adds "noisy_ids" and "t": per block (BD3-LM) or per segment
	// (HDP) a level t drawn uniformly from [MinNoise, MaxNoise) (MaxNoise
	// 0 means 1), and each answer token (plan and execution for HDP)
	// replaced by Mask with probability t. The prompt is never masked.
	Noise              bool
	MinNoise, MaxNoise float64
	// Draws makes each example Draws samples in a row (0 means 1), each
	// with noise of its own: validation averages the NELBO over several t.
	Draws int
}

// Dataset is a data.Dataset of tokenized examples. Its tensors, each
// [SeqLen]: "input_ids" int64 (padding is EndOfText), "attention_mask"
// uint8 (1 on real tokens), "loss_mask" uint8 (1 on tokens to predict),
// "segment_ids" int64 (0 prompt, then 1 answer for BD3-LM; 0 question,
// 1 plan, 2 execution for HDP; padding has its segment's id), and with
// Noise "noisy_ids" int64 and "t" float32.
type Dataset struct {
	cfg  Config
	seqs []sequence
	// truncated counts examples cut to fit.
	truncated int
	// BadRecords counts the records of the file(s) dropped as not GSM8K
	// (data.skip_bad_files), for the run to report: set by the caller.
	BadRecords int
}

// sequence is one example laid out: ids and per-position flags.
type sequence struct {
	ids  []int64
	attn []uint8
	loss []uint8
	seg  []int64
}

// New tokenizes examples with tok (in parallel) and lays them out.
func New(examples []Example, tok *Tokenizer, cfg Config) (*Dataset, error) {
	if cfg.SeqLen < 2 {
		return nil, fmt.Errorf("tokens: seq_len %d", cfg.SeqLen)
	}
	if cfg.Segments == nil {
		if cfg.BlockSize < 1 || cfg.SeqLen%cfg.BlockSize != 0 {
			return nil, fmt.Errorf("tokens: block size %d does not divide seq_len %d", cfg.BlockSize, cfg.SeqLen)
		}
	} else {
		sum := 0
		for _, s := range cfg.Segments {
			if s < 1 {
				return nil, fmt.Errorf("tokens: segment lengths %v", cfg.Segments)
			}
			sum += s
		}
		if len(cfg.Segments) != 3 || sum != cfg.SeqLen {
			return nil, fmt.Errorf("tokens: segments %v must be question, plan and execution adding up to seq_len %d", cfg.Segments, cfg.SeqLen)
		}
	}
	if cfg.MaxNoise == 0 {
		cfg.MaxNoise = 1
	}
	if cfg.MinNoise < 0 || cfg.MinNoise >= cfg.MaxNoise || cfg.MaxNoise > 1 {
		return nil, fmt.Errorf("tokens: noise range [%v, %v), want 0 ≤ min < max ≤ 1", cfg.MinNoise, cfg.MaxNoise)
	}
	if len(examples) == 0 {
		return nil, fmt.Errorf("tokens: no examples")
	}
	d := &Dataset{cfg: cfg, seqs: make([]sequence, len(examples))}
	cut := make([]bool, len(examples))
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(examples); i += workers {
				d.seqs[i], cut[i] = d.layout(tok, examples[i])
			}
		})
	}
	wg.Wait()
	for _, c := range cut {
		if c {
			d.truncated++
		}
	}
	return d, nil
}

// layout places one example; it reports whether anything was cut.
func (d *Dataset) layout(tok *Tokenizer, e Example) (sequence, bool) {
	L := d.cfg.SeqLen
	s := sequence{ids: make([]int64, L), attn: make([]uint8, L), loss: make([]uint8, L), seg: make([]int64, L)}
	for i := range s.ids {
		s.ids[i] = EndOfText
	}
	cut := false
	// put writes ids into [lo, hi) as segment seg, returning where it ended.
	put := func(ids []int64, lo, hi int, seg int64, loss uint8) int {
		if lo+len(ids) > hi {
			ids, cut = ids[:max(0, hi-lo)], true
		}
		copy(s.ids[lo:], ids)
		for i := lo; i < hi; i++ {
			s.seg[i] = seg
		}
		for i := lo; i < lo+len(ids); i++ {
			s.attn[i], s.loss[i] = 1, loss
		}
		return lo + len(ids)
	}
	q := tok.Encode(nil, e.Question)
	if d.cfg.Segments == nil {
		bs := d.cfg.BlockSize
		end := put(q, 0, L-bs, 0, 0) // leave at least one block for the answer
		start := (end + bs - 1) / bs * bs
		put(append(tok.Encode(nil, e.Answer), EndOfText), start, L, 1, 1)
		return s, cut
	}
	g := d.cfg.Segments
	put(q, 0, g[0], 0, 0)
	put(append(tok.Encode(nil, e.PlanText()), EndOfText), g[0], g[0]+g[1], 1, 1)
	put(append(tok.Encode(nil, e.Answer), EndOfText), g[0]+g[1], L, 2, 1)
	return s, cut
}

// Len is the number of samples: examples × Draws.
func (d *Dataset) Len() int { return len(d.seqs) * d.draws() }

func (d *Dataset) draws() int { return max(1, d.cfg.Draws) }

// Truncated counts the examples cut to fit their sequence or segments.
func (d *Dataset) Truncated() int { return d.truncated }

// Examples is the number of examples (Len counts each Draws times).
func (d *Dataset) Examples() int { return len(d.seqs) }

// Spec lists the tensors; see Dataset.
func (d *Dataset) Spec() []data.TensorSpec {
	L := []int{d.cfg.SeqLen}
	s := []data.TensorSpec{
		{Name: "input_ids", DType: data.Int64, Shape: L},
		{Name: "attention_mask", DType: data.Uint8, Shape: L},
		{Name: "loss_mask", DType: data.Uint8, Shape: L},
		{Name: "segment_ids", DType: data.Int64, Shape: L},
	}
	if d.cfg.Noise {
		s = append(s, data.TensorSpec{Name: "noisy_ids", DType: data.Int64, Shape: L}, data.TensorSpec{Name: "t", DType: data.Float32, Shape: L})
	}
	return s
}

// Load copies the sequence of sample i and, with Noise, masks it from rng.
func (d *Dataset) Load(i int, rng *rand.Rand, dst data.Sample) error {
	s := &d.seqs[i/d.draws()]
	copy(dst[0].I64, s.ids)
	copy(dst[1].U8, s.attn)
	copy(dst[2].U8, s.loss)
	copy(dst[3].I64, s.seg)
	if !d.cfg.Noise {
		return nil
	}
	noisy, t := dst[4].I64, dst[5].F32
	copy(noisy, s.ids)
	level, group := 0.0, -1
	for p := range s.ids {
		// A new noise level per block (BD3-LM) or per segment (HDP).
		g := int(s.seg[p])
		if d.cfg.Segments == nil {
			g = p / d.cfg.BlockSize
		}
		if g != group {
			group, level = g, d.cfg.MinNoise+(d.cfg.MaxNoise-d.cfg.MinNoise)*rng.Float64()
		}
		t[p] = float32(level)
		if s.loss[p] == 1 && rng.Float64() < level {
			noisy[p] = Mask
		}
	}
	return nil
}
