package ortopt

import (
	"fmt"
	"strconv"
)

// CPUOptions tune the CPU execution provider.
type CPUOptions struct {
	IntraOpThreads int  // threads inside one op; 0 lets ONNX Runtime choose
	InterOpThreads int  // threads across independent ops; 0 lets ONNX Runtime choose
	DisableArena   bool // allocate each buffer with malloc instead of ORT's arena
}

// CUDAOptions tune the CUDA execution provider; the names are ONNX Runtime's.
type CUDAOptions struct {
	UseTF32             bool   // TF32 tensor cores for fp32 MatMul and Conv
	ConvAlgoSearch      string // cudnn_conv_algo_search: EXHAUSTIVE, HEURISTIC or DEFAULT
	GPUMemLimit         int64  // bytes the arena may take; 0 means no limit
	ArenaExtendStrategy string // kNextPowerOfTwo or kSameAsRequested
	EnableCUDAGraph     bool   // capture the graph once and replay it
	PreferNHWC          bool   // prefer_nhwc: Conv, BatchNormalization and pools channels-last
	// AllowCPUFallback lets ONNX Runtime put nodes without a CUDA kernel on the
	// CPU. Off by default: a silent fallback copies tensors across PCIe every
	// step and leaves the GPU idle.
	AllowCPUFallback bool
}

// Options configure a session: its device and provider settings.
type Options struct {
	Device Device
	CPU    CPUOptions
	CUDA   CUDAOptions
	// DisableOptimizations turns ONNX Runtime's graph rewrites off; for tests
	// that compare kernels one by one.
	DisableOptimizations bool
	// DisableMemPattern turns off ONNX Runtime's memory pattern: with
	// symbolic dimensions it allocates, at the second run, the first run's
	// buffers as one block on top of what the arena already holds
	// (measured on a training graph: twice the memory).
	DisableMemPattern bool
	// DisabledOptimizers names ONNX Runtime graph rewrites to skip
	// (optimization.disable_specified_optimizers), e.g.
	// CommonSubexpressionElimination, which would merge the backward
	// pass's recomputations back into the forward values they replace.
	DisabledOptimizers []string
	// ProfilePrefix, when set, makes ONNX Runtime record every node's run
	// time into <prefix>_<date>.json, written when the session closes: a
	// Chrome trace (chrome://tracing, Perfetto).
	ProfilePrefix string
	// Quiet keeps ONNX Runtime's log to fatal errors for the session: for
	// probes whose failure to load is an answer, not a fault to print.
	Quiet bool
}

var (
	convAlgoSearches = []string{"EXHAUSTIVE", "HEURISTIC", "DEFAULT"}
	arenaStrategies  = []string{"kNextPowerOfTwo", "kSameAsRequested"}
)

// Validate reports the first option value that ONNX Runtime would reject or misread.
func (o Options) Validate() error {
	if o.Device.ID < 0 {
		return &OptionError{Option: "device", Value: o.Device.ID, Want: "a device ordinal ≥ 0"}
	}
	if o.CPU.IntraOpThreads < 0 {
		return &OptionError{Option: "intra_op_threads", Value: o.CPU.IntraOpThreads, Want: "≥ 0 (0: ONNX Runtime chooses)"}
	}
	if o.CPU.InterOpThreads < 0 {
		return &OptionError{Option: "inter_op_threads", Value: o.CPU.InterOpThreads, Want: "≥ 0 (0: ONNX Runtime chooses)"}
	}
	c := o.CUDA
	if c.ConvAlgoSearch != "" && !oneOf(c.ConvAlgoSearch, convAlgoSearches) {
		return &OptionError{Option: "cudnn_conv_algo_search", Value: strconv.Quote(c.ConvAlgoSearch), Want: fmt.Sprint("one of ", convAlgoSearches)}
	}
	if c.ArenaExtendStrategy != "" && !oneOf(c.ArenaExtendStrategy, arenaStrategies) {
		return &OptionError{Option: "arena_extend_strategy", Value: strconv.Quote(c.ArenaExtendStrategy), Want: fmt.Sprint("one of ", arenaStrategies)}
	}
	if c.GPUMemLimit < 0 {
		return &OptionError{Option: "gpu_mem_limit", Value: c.GPUMemLimit, Want: "bytes ≥ 0 (0: no limit)"}
	}
	return nil
}

// CUDAProviderOptions returns the key/value pairs ONNX Runtime's
// UpdateCUDAProviderOptions takes.
func (o Options) CUDAProviderOptions() (keys, values []string) {
	add := func(k, v string) { keys, values = append(keys, k), append(values, v) }
	add("device_id", strconv.Itoa(o.Device.ID))
	add("use_tf32", boolFlag(o.CUDA.UseTF32))
	if o.CUDA.ConvAlgoSearch != "" {
		add("cudnn_conv_algo_search", o.CUDA.ConvAlgoSearch)
	}
	if o.CUDA.GPUMemLimit > 0 {
		add("gpu_mem_limit", strconv.FormatInt(o.CUDA.GPUMemLimit, 10))
	}
	if o.CUDA.ArenaExtendStrategy != "" {
		add("arena_extend_strategy", o.CUDA.ArenaExtendStrategy)
	}
	add("enable_cuda_graph", boolFlag(o.CUDA.EnableCUDAGraph))
	if o.CUDA.PreferNHWC {
		add("prefer_nhwc", "1")
	}
	return keys, values
}

func boolFlag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}
