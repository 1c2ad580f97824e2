package metrics

import (
	"fmt"
	"math"
)

// TopKMax is the largest k for which TopK reports accuracy.
const TopKMax = 10

// TopK accumulates top-k classification accuracy, for every k from 1 to
// TopKMax at once (top-1 and top-5 for ImageNet), over batches and workers.
//
// A sample is correct at k when its label's rank is below k. The rank is
// the number of classes scoring strictly higher than the label, plus the
// number scoring equal with a lower class index: the label's position in a
// stable descending sort of the scores (numpy's argsort(-scores,
// kind="stable")). So ties go to the lower class index, neither counting all
// tied classes as correct nor all as wrong. torch.topk leaves its order among
// ties unspecified, so results can differ from torchmetrics only when the
// label ties with the k-th score.
//
// The zero value is ready to use; counts are integers, so results do not
// depend on the order of Add and Merge calls.
type TopK struct {
	hits [TopKMax]int64 // hits[r]: samples whose label has rank r
	n    int64
}

// Add accumulates one batch: logits holds len(labels) rows of classes scores
// (logits or probabilities; only their order matters), labels the true class
// of each row. It returns an error, leaving t unchanged, if the sizes do not
// match, a label is outside [0, classes), or a score is NaN (±Inf scores are
// allowed, e.g. for masked classes).
func (t *TopK) Add(logits []float32, classes int, labels []int64) error {
	if classes <= 0 {
		return fmt.Errorf("metrics: TopK.Add: classes = %d must be positive", classes)
	}
	if len(logits) != classes*len(labels) {
		return fmt.Errorf("metrics: TopK.Add: %d logits for %d labels of %d classes; want %d",
			len(logits), len(labels), classes, classes*len(labels))
	}
	var batch TopK
	for i, label := range labels {
		if label < 0 || label >= int64(classes) {
			return fmt.Errorf("metrics: TopK.Add: labels[%d] = %d is outside [0, %d)", i, label, classes)
		}
		row := logits[i*classes : (i+1)*classes]
		s := row[label]
		rank := 0
		for j, v := range row {
			if math.IsNaN(float64(v)) {
				return fmt.Errorf("metrics: TopK.Add: logits[%d] (sample %d, class %d) is NaN", i*classes+j, i, j)
			}
			if v > s || (v == s && int64(j) < label) {
				rank++
			}
		}
		if rank < TopKMax {
			batch.hits[rank]++
		}
		batch.n++
	}
	t.Merge(&batch)
	return nil
}

// Merge adds the samples accumulated by o to t.
func (t *TopK) Merge(o *TopK) {
	for i, h := range o.hits {
		t.hits[i] += h
	}
	t.n += o.n
}

// Count returns the number of samples accumulated.
func (t *TopK) Count() int64 { return t.n }

// Accuracy returns the fraction of samples whose label ranks in the top k,
// for k from 1 to TopKMax, or an error if k is out of range or no samples
// were added.
func (t *TopK) Accuracy(k int) (float64, error) {
	if k < 1 || k > TopKMax {
		return 0, fmt.Errorf("metrics: TopK.Accuracy: k = %d is outside [1, %d]", k, TopKMax)
	}
	if t.n == 0 {
		return 0, fmt.Errorf("metrics: TopK: no samples accumulated")
	}
	var c int64
	for _, h := range t.hits[:k] {
		c += h
	}
	return float64(c) / float64(t.n), nil
}
