// Package validation computes what a validation pass reports, for the
// trainer's validation and `ortrain eval --checkpoint` alike: val/loss
// (the sample-weighted mean of the graph's batch loss); val/top1 and
// val/top5 for a classifier; val/nll, val/ppl and val/bpt per predicted
// token for a language model; val/psnr, val/ssim and the codebook's usage
// and perplexity for a VQ autoencoder. Adding a metric touches this file
// and the name in metrics (metrics.Val*).
package validation

import (
	"cmp"
	"math"
	"slices"

	"github.com/ortrain/ortrain/metrics"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/loss"
)

// TokenMask is the token loader's mask of the positions a language model
// predicts; a model that reads it reports per-token NLL and perplexity.
const TokenMask = "loss_mask"

// The model outputs validation reads besides the loss: a classifier's
// logits (the cross-entropy loss's prediction), and a VQ autoencoder's
// reconstruction and codebook indices (the vqgan3d recipe's names).
const (
	ReconOutput = "recon"
	CodesOutput = "codes"
)

// ClassifierOutput is the logits output of cross-entropy artifacts, ""
// for others.
func ClassifierOutput(m *artifacts.Manifest) string {
	if m.LossSpec.Kind != loss.CrossEntropy || len(m.Outputs) == 0 {
		return ""
	}
	return cmp.Or(m.LossSpec.Output, m.Outputs[0])
}

// Outputs are the model outputs validation reads (besides the loss).
func Outputs(m *artifacts.Manifest) []string {
	var out []string
	if c := ClassifierOutput(m); c != "" {
		out = append(out, c)
	}
	for _, o := range []string{ReconOutput, CodesOutput} {
		if slices.Contains(m.Outputs, o) {
			out = append(out, o)
		}
	}
	return out
}

// Names are the metrics validation computes for the artifacts m, the only
// ones trainer.monitor can rank checkpoints or stop early by.
func Names(m *artifacts.Manifest) []string {
	out := []string{metrics.ValLoss}
	if ClassifierOutput(m) != "" {
		out = append(out, metrics.ValTop1, metrics.ValTop5)
	}
	if slices.ContainsFunc(m.Data, func(d artifacts.Tensor) bool { return d.Name == TokenMask }) {
		out = append(out, metrics.ValNLL, metrics.ValPPL, metrics.ValBPT)
	}
	if slices.Contains(m.Outputs, ReconOutput) {
		out = append(out, metrics.ValPSNR)
		if ssimFits(m) {
			out = append(out, metrics.ValSSIM)
		}
	}
	if slices.Contains(m.Outputs, CodesOutput) {
		out = append(out, metrics.ValCodebookPerplexity, metrics.ValCodebookUsage)
	}
	return out
}

// ssimFits says whether validation computes val/ssim for m's samples: one
// channel whose spatial axes hold SSIM's Gaussian window (see Add). Sizes
// the graph leaves free are taken to fit.
func ssimFits(m *artifacts.Manifest) bool {
	if len(m.Data) == 0 {
		return false
	}
	s := m.Data[0].Shape
	if len(s) < 4 {
		return true
	}
	for _, d := range s[1 : len(s)-3] {
		if d > 1 {
			return false
		}
	}
	for _, d := range s[len(s)-3:] {
		if d > 0 && d < metrics.GaussianWindow {
			return false
		}
	}
	return true
}

// Metrics accumulates a validation pass.
type Metrics struct {
	m           *artifacts.Manifest
	feeds       data.Feeds
	lossSum     float64
	rows        int
	topk        metrics.TopK
	classes     int
	ppl         metrics.Perplexity
	psnr, ssim  metrics.Mean
	codes       map[int64]int64 // codebook entries used, and how often
	codebookLen int64
}

// New starts a pass over the artifacts m of the run configured by c.
func New(m *artifacts.Manifest, c *config.Config) *Metrics {
	return &Metrics{m: m, feeds: data.Feeds(c.Data.Feeds), codebookLen: models.CodebookSize(c.Model.Recipe, c.Model.Params)}
}

// Add takes a batch of rows samples, the graph's loss on it and its
// outputs by name (those Outputs lists; others are ignored): a
// classifier's logits against the labels (top-1/top-5, as torchvision's
// recipes watch), a language model's per-token loss weighed back by its
// mask, a reconstruction against its input (PSNR and SSIM on the loader's
// [-1, 1] scale, data range 2), and the codebook entries a VQ model
// picked (usage and perplexity).
func (v *Metrics) Add(b *data.Batch, rows int, batchLoss float64, outs map[string]*ort.Value) error {
	v.lossSum += batchLoss * float64(rows) // the graph's loss is a batch mean
	v.rows += rows
	if mask := b.Tensor(TokenMask); mask != nil && mask.DType == data.Uint8 {
		// The graph's loss is per predicted token (the NELBO over the
		// mask's sum, at least 1): weigh it back by that count.
		tokens := int64(0)
		for _, m := range mask.U8 {
			tokens += int64(m)
		}
		if err := v.ppl.Add(batchLoss*float64(max(tokens, 1)), tokens); err != nil {
			return err
		}
	}
	if logits := outs[ClassifierOutput(v.m)]; logits != nil && len(logits.Shape()) == 2 && logits.DType() == ort.Float32 {
		if labels, ok := v.feeds.ClassIndices(b); ok {
			v.classes = int(logits.Shape()[1])
			if err := v.topk.Add(ort.Data[float32](logits), v.classes, labels.I64); err != nil {
				return err
			}
		}
	}
	if recon := outs[ReconOutput]; recon != nil && recon.DType() == ort.Float32 && len(v.m.Data) > 0 {
		if err := v.addReconstruction(b, recon); err != nil {
			return err
		}
	}
	if codes := outs[CodesOutput]; codes != nil && codes.DType() == ort.Int64 {
		if v.codes == nil {
			v.codes = map[int64]int64{}
		}
		for _, c := range ort.Data[int64](codes) {
			v.codes[c]++
		}
	}
	return nil
}

func (v *Metrics) addReconstruction(b *data.Batch, recon *ort.Value) error {
	input, _, err := v.feeds.Source(v.m.Data[0].Name, b)
	shape := recon.Shape()
	if err != nil || input.DType != data.Float32 || len(input.F32) != len(ort.Data[float32](recon)) || len(shape) < 4 {
		return nil // not a reconstruction of the first input
	}
	rec, n := ort.Data[float32](recon), int(shape[0])
	per := len(rec) / max(n, 1)
	dims := make([]int, 0, 3)
	for _, d := range shape[len(shape)-3:] {
		dims = append(dims, int(d))
	}
	for i := range n {
		x, y := input.F32[i*per:(i+1)*per], rec[i*per:(i+1)*per]
		p, err := metrics.PSNR(x, y, 2)
		if err != nil {
			return err
		}
		v.psnr.Add(p)
		// One channel: SSIM over the volume, where its 11-sample Gaussian
		// window fits (scikit-image's default).
		if per == dims[0]*dims[1]*dims[2] && slices.Min(dims) >= metrics.GaussianWindow {
			s, err := metrics.SSIM(metrics.Volume{Data: x, Shape: dims}, metrics.Volume{Data: y, Shape: dims}, metrics.SSIMOptions{DataRange: 2})
			if err != nil {
				return err
			}
			v.ssim.Add(s)
		}
	}
	return nil
}

// Shardable reports whether a pass split across the ranks of a
// data-parallel run sums back to the whole pass: every accumulator adds
// up, and a codebook's histogram needs the codebook's size.
func (v *Metrics) Shardable() bool {
	return !slices.Contains(Outputs(v.m), CodesOutput) || v.codebookLen > 0
}

// Reduce makes this rank's pass the whole job's: sum adds a vector
// across the ranks in place (collective.Comm.SumFloat64), and every
// accumulator is summed through it.
func (v *Metrics) Reduce(sum func([]float64) error) error {
	seen := 0.0
	if v.classes > 0 {
		seen = 1
	}
	vec := []float64{v.lossSum, float64(v.rows), float64(v.classes), seen}
	vec = append(vec, v.topk.Totals()...)
	vec = append(vec, v.ppl.Totals()...)
	vec = append(vec, v.psnr.Totals()...)
	vec = append(vec, v.ssim.Totals()...)
	hist := make([]float64, v.codebookLen)
	for c, n := range v.codes {
		if c >= 0 && c < int64(len(hist)) {
			hist[c] = float64(n)
		}
	}
	vec = append(vec, hist...)
	if err := sum(vec); err != nil {
		return err
	}
	next := &Metrics{m: v.m, feeds: v.feeds, codebookLen: v.codebookLen, lossSum: vec[0], rows: int(vec[1])}
	if vec[3] > 0 {
		next.classes = int(vec[2] / vec[3]) // every rank that saw logits saw as many classes
	}
	rest := vec[4:]
	take := func(n int) []float64 { x := rest[:n]; rest = rest[n:]; return x }
	next.topk.AddTotals(take(metrics.TopKMax + 1))
	next.ppl.AddTotals(take(2))
	next.psnr.AddTotals(take(2))
	next.ssim.AddTotals(take(2))
	for c, n := range take(len(hist)) {
		if n > 0 {
			if next.codes == nil {
				next.codes = map[int64]int64{}
			}
			next.codes[int64(c)] = int64(n)
		}
	}
	*v = *next
	return nil
}

// Rows is the number of samples added.
func (v *Metrics) Rows() int { return v.rows }

// Report writes the pass's metrics into out, named as metrics.Val*.
func (v *Metrics) Report(out map[string]float64) {
	out[metrics.ValLoss] = v.lossSum / float64(max(v.rows, 1))
	if v.classes > 0 && v.topk.Count() > 0 {
		for _, k := range []int{1, 5} {
			if k <= v.classes {
				out[metrics.ValTopK(k)], _ = v.topk.Accuracy(k)
			}
		}
	}
	v.ppl.Report(out)
	if v.psnr.Count() > 0 {
		out[metrics.ValPSNR], _ = v.psnr.Value()
	}
	if v.ssim.Count() > 0 {
		out[metrics.ValSSIM], _ = v.ssim.Value()
	}
	if len(v.codes) > 0 {
		var total int64
		for _, n := range v.codes {
			total += n
		}
		h := 0.0
		for _, n := range v.codes {
			p := float64(n) / float64(total)
			h -= p * math.Log(p)
		}
		out[metrics.ValCodebookPerplexity] = math.Exp(h)
		if v.codebookLen > 0 {
			out[metrics.ValCodebookUsage] = float64(len(v.codes)) / float64(v.codebookLen)
		}
	}
}
