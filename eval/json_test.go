package eval

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestJSONOfAPerfectReconstruction: a PSNR of +Inf (identical volumes) is
// written as "inf", in a volume's metrics and in the means; the rest as
// numbers.
func TestJSONOfAPerfectReconstruction(t *testing.T) {
	ms := 1.0
	v := VolumeMetrics{Name: "a", Shape: [3]int{2, 3, 4}, DataRange: 2, PSNR: math.Inf(1), SSIM: &ms, MSSSIM: &ms}
	r := CheckpointResult{Checkpoint: "ck", Step: 3, Volumes: []VolumeMetrics{v}, Mean: map[string]float64{"psnr": math.Inf(1), "ssim": 0.5, "odd": math.NaN()}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{`"psnr":"inf"`, `"ssim":1,`, `"name":"a"`, `"shape":[2,3,4]`, `"ms_ssim":1`, `"mean":{"odd":"nan","psnr":"inf","ssim":0.5}`, `"step":3`} {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %s", got, want)
		}
	}
	if strings.Count(got, `"psnr"`) != 2 {
		t.Errorf("%s: want psnr once per volume and once in the means", got)
	}
}
