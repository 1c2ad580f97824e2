package validation

import (
	"slices"
	"testing"

	"github.com/ortrain/ortrain/metrics"
	"github.com/ortrain/ortrain/training/artifacts"
)

// TestSSIMOnlyWhereItIsComputed: val/ssim is offered (to trainer.monitor)
// only for one-channel patches that hold SSIM's window, as Add computes it.
func TestSSIMOnlyWhereItIsComputed(t *testing.T) {
	for _, tc := range []struct {
		shape []int64
		ssim  bool
	}{
		{[]int64{-1, 1, 32, 32, 32}, true},
		{[]int64{-1, 1, 8, 8, 8}, false},
		{[]int64{-1, 1, 32, 10, 32}, false},
		{[]int64{-1, 2, 32, 32, 32}, false},
		{[]int64{-1, 1, -1, -1, -1}, true},
	} {
		m := &artifacts.Manifest{Data: []artifacts.Tensor{{Name: "volume", DType: "float32", Shape: tc.shape}}, Outputs: []string{ReconOutput}}
		names := Names(m)
		if got := slices.Contains(names, metrics.ValSSIM); got != tc.ssim || !slices.Contains(names, metrics.ValPSNR) {
			t.Errorf("patches %v: %v; want val/psnr, and val/ssim %v", tc.shape, names, tc.ssim)
		}
	}
}
