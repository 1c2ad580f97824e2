// Package metrics computes the evaluation metrics ortrain reports, in pure Go:
// PSNR, MSE and MAE; SSIM in 2D and 3D with a Gaussian or uniform window,
// equal to scikit-image's structural_similarity; MS-SSIM following
// torchmetrics' multiscale_structural_similarity_index_measure; perplexity
// and bits per token from summed negative log-likelihoods; and top-k
// classification accuracy.
//
// Images and volumes arrive as float32 slices in C order with a shape (2D:
// H×W, 3D: D×H×W), see Volume. All arithmetic is done in float64.
//
// Streaming accumulators (ErrorAccumulator, Mean, Perplexity, TopK) collect
// per-batch results and merge across batches and workers. Their sums are
// exact (see the notes on ErrorAccumulator), so the value they report does
// not depend on the order of Add and Merge calls.
//
// Functions never panic on user input: a shape mismatch, a volume too small
// for the window, a NaN or Inf in an input, or a non-positive data range is
// reported as an error.
package metrics
