package report

import (
	"context"
	"flag"
	"math"
	"testing"
	"time"

	"github.com/ortrain/ortrain/eval/sliding"
)

var (
	demoNIfTI = flag.String("demo.nifti", "", "NIfTI volume for TestDemo, e.g. /usr/share/mricron/templates/ch2.nii.gz")
	demoOut   = flag.String("demo.out", "", "HTML file TestDemo writes (default: a file in the test's temp dir)")
)

// TestDemo writes a report for a real volume, to look at in a browser:
//
//	go test ./eval/report -run TestDemo -demo.nifti /usr/share/mricron/templates/ch2.nii.gz -demo.out /tmp/report.html
//
// The "reconstruction" is made by sliding-window inference whose predictor
// blurs each 64³ patch and adds noise, so the error map shows edges, noise
// and no seams at window borders. Without -demo.nifti it uses a phantom
// with anisotropic spacing, which keeps the test meaningful in CI.
func TestDemo(t *testing.T) {
	name, shape, spacing := "phantom", [3]int{40, 96, 80}, [3]float64{3, 0.8, 0.8}
	var vol []float32
	if *demoNIfTI != "" {
		n, err := readNIfTI(*demoNIfTI)
		if err != nil {
			t.Fatal(err)
		}
		name, shape, spacing, vol = *demoNIfTI, n.shape, n.spacing, n.data
	} else {
		vol = phantom(shape)
	}
	lo, hi, _ := rangeOf(vol)
	calls := uint64(0)
	predict := func(batch []float32, n int) ([]float32, error) {
		calls++
		p := [3]int{min(64, shape[0]), min(64, shape[1]), min(64, shape[2])}
		per := p[0] * p[1] * p[2]
		out := make([]float32, 0, len(batch))
		for k := range n {
			out = append(out, degrade(batch[k*per:(k+1)*per], p, 0.02*(hi-lo), calls*64+uint64(k))...)
		}
		return out, nil
	}
	patch := [3]int{min(64, shape[0]), min(64, shape[1]), min(64, shape[2])}
	start := time.Now()
	recon, err := sliding.Infer(context.Background(), vol, shape, sliding.Options{Patch: patch, Overlap: 0.5, Mode: sliding.Gaussian, BatchSize: 4}, predict)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sliding-window reconstruction of %v in %v", shape, time.Since(start))
	mae, mse := 0.0, 0.0
	for i := range vol {
		d := float64(recon[i] - vol[i])
		mae += math.Abs(d)
		mse += d * d
	}
	mae /= float64(len(vol))
	mse /= float64(len(vol))
	r := Report{
		Title:     "ortrain reconstruction report — demo",
		Generated: time.Now(),
		Volumes: []VolumeResult{
			{Name: name, Shape: shape, Spacing: spacing, Input: vol, Recon: recon, Metrics: map[string]float64{"PSNR": 10 * math.Log10((hi-lo)*(hi-lo)/mse), "MAE": mae, "SSIM": 0.91}},
			{Name: "phantom (2)", Shape: [3]int{40, 96, 80}, Spacing: [3]float64{3, 0.8, 0.8}, Input: phantom([3]int{40, 96, 80}), Recon: degrade(phantom([3]int{40, 96, 80}), [3]int{40, 96, 80}, 0.05, 3), Metrics: map[string]float64{"PSNR": 27.1, "MAE": 0.03, "SSIM": 0.87}},
		},
		MetricOrder: []string{"PSNR", "SSIM"},
		Charts:      demoCharts(),
		Config:      "[model]\nname = \"vqgan3d\"\npatch = [64, 64, 64]\n\n[eval]\noverlap = 0.5\nblend = \"gaussian\"\nnote = \"</pre><script>alert(1)</script>\"\n",
		Env:         []KV{{"ortrain", "v0.0.0-demo"}, {"ONNX Runtime", "1.30.0"}, {"provider", "CUDA"}, {"device", "NVIDIA H100 80GB HBM3"}},
	}
	out := *demoOut
	if out == "" {
		out = t.TempDir() + "/report.html"
	}
	if err := Write(out, r, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}

// demoCharts returns a loss and a validation chart with plausible curves,
// one NaN and one log axis.
func demoCharts() []Chart {
	var steps, loss, rec, psnr, vsteps []float64
	for s := 0; s <= 2000; s += 10 {
		x := float64(s)
		steps = append(steps, x)
		loss = append(loss, 2*math.Exp(-x/300)+0.1+0.02*math.Sin(x/7))
		rec = append(rec, 1.2*math.Exp(-x/400)+0.05)
	}
	loss[50] = math.NaN()
	for s := 200; s <= 2000; s += 200 {
		vsteps = append(vsteps, float64(s))
		psnr = append(psnr, 22+8*(1-math.Exp(-float64(s)/600)))
	}
	return []Chart{
		{Title: "training loss", YLabel: "loss", LogY: true, Series: []Series{{Name: "total", Step: steps, Value: loss}, {Name: "reconstruction", Step: steps, Value: rec}}},
		{Title: "validation PSNR", YLabel: "dB", Series: []Series{{Name: "PSNR", Step: vsteps, Value: psnr}}},
	}
}
