package ortopt

import (
	"slices"
	"testing"
)

// TestCUDAProviderOptions: each setting reaches ONNX Runtime under its
// own key, prefer_nhwc only when asked for.
func TestCUDAProviderOptions(t *testing.T) {
	o := Options{Device: CUDADevice(1), CUDA: CUDAOptions{UseTF32: true, ConvAlgoSearch: "HEURISTIC", EnableCUDAGraph: true}}
	keys, values := o.CUDAProviderOptions()
	got := map[string]string{}
	for i, k := range keys {
		got[k] = values[i]
	}
	for k, v := range map[string]string{"device_id": "1", "use_tf32": "1", "cudnn_conv_algo_search": "HEURISTIC", "enable_cuda_graph": "1"} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if slices.Contains(keys, "prefer_nhwc") {
		t.Error("prefer_nhwc set without PreferNHWC")
	}
	o.CUDA.PreferNHWC = true
	if keys, values = o.CUDAProviderOptions(); !slices.Contains(keys, "prefer_nhwc") || values[slices.Index(keys, "prefer_nhwc")] != "1" {
		t.Errorf("PreferNHWC: keys %v", keys)
	}
}
