package metrics

import (
	"fmt"
	"math"
)

// Perplexity accumulates summed token negative log-likelihoods (natural
// logarithm) and token counts over batches and workers, and reports
// perplexity exp(ΣNLL/N), the mean NLL in nats and bits per token
// ΣNLL/(N·ln 2). This equals torchmetrics' Perplexity when ΣNLL is the sum
// of -log_softmax(logits)[target] over the non-ignored tokens and N their
// number. For a diffusion LM, feed the per-token NLL bound (the ELBO); the
// result is then the usual perplexity upper bound.
//
// The NLL sum is kept exactly, so results do not depend on the order of Add
// and Merge calls. The zero value is ready to use.
type Perplexity struct {
	nll    exactSum
	tokens int64
}

// Add accumulates a batch: nllSum is the sum of the negative log-likelihoods
// of its tokens in nats, tokens their number. It returns an error, leaving p
// unchanged, if nllSum is NaN or Inf, tokens is negative, tokens is 0 with a
// non-zero nllSum, or nllSum is negative beyond float rounding (below
// -1e-6 per token: a sign error, such as passing log-likelihoods).
func (p *Perplexity) Add(nllSum float64, tokens int64) error {
	switch {
	case math.IsNaN(nllSum) || math.IsInf(nllSum, 0):
		return fmt.Errorf("metrics: Perplexity.Add: NLL sum %v is not finite", nllSum)
	case tokens < 0:
		return fmt.Errorf("metrics: Perplexity.Add: negative token count %d", tokens)
	case tokens == 0 && nllSum != 0:
		return fmt.Errorf("metrics: Perplexity.Add: NLL sum %v for 0 tokens", nllSum)
	case nllSum < -1e-6*float64(tokens):
		return fmt.Errorf("metrics: Perplexity.Add: NLL sum %v over %d tokens is negative; pass -log p, not log p", nllSum, tokens)
	}
	p.nll.add(nllSum)
	p.tokens += tokens
	return nil
}

// Merge adds the batches accumulated by o to p.
func (p *Perplexity) Merge(o *Perplexity) {
	p.nll.merge(&o.nll)
	p.tokens += o.tokens
}

// Tokens returns the number of tokens accumulated.
func (p *Perplexity) Tokens() int64 { return p.tokens }

// MeanNLL returns the mean negative log-likelihood per token in nats (the
// cross-entropy loss), or an error if no tokens were added.
func (p *Perplexity) MeanNLL() (float64, error) {
	if p.tokens == 0 {
		return 0, fmt.Errorf("metrics: Perplexity: no tokens accumulated")
	}
	return p.nll.value() / float64(p.tokens), nil
}

// Value returns the perplexity exp(ΣNLL/N), or an error if no tokens were
// added.
func (p *Perplexity) Value() (float64, error) {
	m, err := p.MeanNLL()
	if err != nil {
		return 0, err
	}
	return math.Exp(m), nil
}

// BitsPerToken returns ΣNLL/(N·ln 2), the mean NLL in bits, or an error if
// no tokens were added. It is log2 of the perplexity.
func (p *Perplexity) BitsPerToken() (float64, error) {
	m, err := p.MeanNLL()
	if err != nil {
		return 0, err
	}
	return m / math.Ln2, nil
}
