// Package tokens turns GSM8K-format JSONL into fixed-length token sequences
// for diffusion language models: GPT-2 byte-level BPE ids, padded with masks,
// in BD3-LM's block layout or HDP-Diffusion's question/plan/execution
// segments, optionally noised with the mask token.
package tokens

import (
	"sync"

	"github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
)

// GPT-2's special ids and the vocabulary the models see.
const (
	// EndOfText is GPT-2's <|endoftext|>; it ends each answer and pads.
	EndOfText = 50256
	// Mask is the diffusion mask token. GPT-2 has none, so, as BD3-LM does,
	// it is one id appended after the vocabulary.
	Mask = 50257
	// VocabSize is GPT-2's 50257 tokens plus Mask: the size of the models'
	// embedding and output layers.
	VocabSize = 50258
)

// Tokenizer is GPT-2's byte-level BPE. Its vocabulary is embedded in the
// binary (tiktoken-go-loader's offline r50k_base, which is GPT-2's), so
// nothing is fetched at run time. It is safe for concurrent use.
type Tokenizer struct {
	enc *tiktoken.Tiktoken
}

var (
	gpt2Once sync.Once
	gpt2     *Tokenizer
	gpt2Err  error
)

// GPT2 returns the shared GPT-2 tokenizer, built on first use (about a
// second: it parses the 50k merges).
func GPT2() (*Tokenizer, error) {
	gpt2Once.Do(func() {
		// The loader is process-wide state of tiktoken-go; only the offline
		// one may ever be set, so setting it here is safe.
		tiktoken.SetBpeLoader(loader.NewOfflineLoader())
		enc, err := tiktoken.GetEncoding(tiktoken.MODEL_R50K_BASE)
		gpt2, gpt2Err = &Tokenizer{enc: enc}, err
	})
	return gpt2, gpt2Err
}

// Encode appends the ids of s to dst. Special-token text in s, such as
// "<|endoftext|>", is encoded as ordinary text: data cannot inject control
// tokens.
func (t *Tokenizer) Encode(dst []int64, s string) []int64 {
	for _, id := range t.enc.EncodeOrdinary(s) {
		dst = append(dst, int64(id))
	}
	return dst
}

// Decode turns ids back into text; Mask reads as "<|mask|>".
func (t *Tokenizer) Decode(ids []int64) string {
	var out []byte
	var run []int
	flush := func() {
		out = append(out, t.enc.Decode(run)...)
		run = run[:0]
	}
	for _, id := range ids {
		if id == Mask {
			flush()
			out = append(out, "<|mask|>"...)
			continue
		}
		run = append(run, int(id))
	}
	flush()
	return string(out)
}
