package metrics

import "fmt"

// Names of the validation metrics, as training logs them (metrics.csv,
// TensorBoard), trainer.monitor ranks by them and eval reports them: one
// spelling for validation, eval and reports.
const (
	ValLoss               = "val/loss"
	ValTop1               = "val/top1"
	ValTop5               = "val/top5"
	ValNLL                = "val/nll" // per predicted token, nats
	ValPPL                = "val/ppl"
	ValBPT                = "val/bpt" // bits per token
	ValPSNR               = "val/psnr"
	ValSSIM               = "val/ssim"
	ValCodebookUsage      = "val/codebook_usage"
	ValCodebookPerplexity = "val/codebook_perplexity"
	ValExactMatch         = "val/exact_match" // GSM8K answers, eval --generate
	ValGenerated          = "val/generated"   // answers eval --generate scored
)

// ValNames lists every validation metric, with what it measures: the
// registry docs/REGISTRIES.md is generated from.
var ValNames = []struct{ Name, What string }{
	{ValLoss, "the graph's loss, mean over validation samples"},
	{ValTop1, "top-1 accuracy (classifiers)"},
	{ValTop5, "top-5 accuracy (classifiers with 5 classes or more)"},
	{ValNLL, "negative log-likelihood per predicted token, nats (language models: the NELBO bound)"},
	{ValPPL, "perplexity, exp(val/nll)"},
	{ValBPT, "bits per token, val/nll / ln 2"},
	{ValPSNR, "PSNR of the reconstruction on the loader's [-1, 1] scale (data range 2), mean over patches"},
	{ValSSIM, "3-D SSIM likewise, where the 11-sample window fits"},
	{ValCodebookUsage, "share of the codebook the validation codes use (VQ models)"},
	{ValCodebookPerplexity, "exp of the entropy of the validation codes' frequencies (VQ models)"},
	{ValExactMatch, "GSM8K exact match of generated answers (eval --generate)"},
	{ValGenerated, "answers eval --generate scored"},
}

// ValTopK is the name of top-k accuracy (val/top1, val/top5).
func ValTopK(k int) string { return fmt.Sprintf("val/top%d", k) }

// Report writes the accumulated NLL per token, perplexity and bits per
// token into out under their validation names; nothing when no tokens
// were added.
func (p *Perplexity) Report(out map[string]float64) {
	if p.tokens == 0 {
		return
	}
	out[ValNLL], _ = p.MeanNLL()
	out[ValPPL], _ = p.Value()
	out[ValBPT], _ = p.BitsPerToken()
}
