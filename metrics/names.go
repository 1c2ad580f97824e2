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
