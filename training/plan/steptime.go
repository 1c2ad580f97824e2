package plan

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/cudaform"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/memplan"
	"github.com/ortrain/ortrain/training/precision"
)

// GPU is a GPU's published peak rates, what the step-time model divides by.
type GPU struct {
	// Name is the key --gpu takes.
	Name string `json:"name"`
	// Title names the card for people.
	Title string `json:"title"`
	// Tensor16 is dense float16/bfloat16 tensor-core FLOP/s, TF32 dense
	// TF32 tensor-core FLOP/s, FP32 float32 FLOP/s without tensor cores.
	Tensor16 float64 `json:"tensor16_flops"`
	TF32     float64 `json:"tf32_flops"`
	FP32     float64 `json:"fp32_flops"`
	// Bandwidth is the device memory's bytes per second.
	Bandwidth float64 `json:"bandwidth"`
}

// GPUs are the cards plan predicts for, from their data sheets (SXM
// parts for the A100 80GB, H100 and H200; dense rates, no sparsity).
var GPUs = map[string]GPU{
	"a100": {Name: "a100", Title: "NVIDIA A100 SXM 80GB", Tensor16: 312e12, TF32: 156e12, FP32: 19.5e12, Bandwidth: 2.039e12},
	"h200": {Name: "h200", Title: "NVIDIA H200 SXM", Tensor16: 989e12, TF32: 494e12, FP32: 67e12, Bandwidth: 4.8e12},
	"h100": {Name: "h100", Title: "NVIDIA H100 SXM", Tensor16: 989e12, TF32: 494e12, FP32: 67e12, Bandwidth: 3.35e12},
	"a10g": {Name: "a10g", Title: "NVIDIA A10G", Tensor16: 125e12, TF32: 62.5e12, FP32: 31.2e12, Bandwidth: 600e9},
}

// GPUNames lists GPUs' keys, sorted.
func GPUNames() []string {
	names := make([]string, 0, len(GPUs))
	for n := range GPUs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LookupGPU finds a GPU by its key, in any case ("H200", "h200").
func LookupGPU(name string) (GPU, error) {
	if g, ok := GPUs[strings.ToLower(strings.TrimSpace(name))]; ok {
		return g, nil
	}
	return GPU{}, fmt.Errorf("unknown GPU %q: want one of %s", name, strings.Join(GPUNames(), ", "))
}

// DefaultGPU is the GPU a configuration named name is planned for: the
// one its name mentions (the presets are named after their card, as
// resnet50-a10g-balanced), else the H200.
func DefaultGPU(name string) GPU {
	lower := strings.ToLower(name)
	for _, n := range GPUNames() {
		if strings.Contains(lower, n) {
			return GPUs[n]
		}
	}
	return GPUs["h200"]
}

// Op classes of the step-time model: each has its own efficiency, the
// fraction of the peak its kernels reach.
const (
	classConv            = "conv"              // Conv: cuDNN forward
	classConvT           = "conv-transpose"    // ConvTranspose: cuDNN backward-data
	classConvWgrad       = "conv-wgrad"        // a Conv whose window is a gradient map: a weight gradient
	classConvWgradVolume = "conv-wgrad-volume" // the same over volumes
	classConvVolume      = "conv-volume"       // Conv, ConvTranspose over volumes: cuDNN's NCDHW kernels
	classGEMM            = "gemm"              // MatMul, Gemm: cuBLAS
	// A MatMul summing 2^16 or more terms into each output (a volume's
	// weight gradient: M, N the channels, K the voxels): cuBLAS has few
	// output tiles to spread over the GPU (in float32 with TF32, as a
	// bf16-mixed build's emulated convolutions' gradients run, far below
	// the rate float16's reach).
	classGEMMLongK = "gemm-long-k"
	// The two volume classes above in float16, whose kernels run at a
	// rate of their own (cuDNN's and cuBLAS's float16 paths, not their
	// bfloat16 or TF32 ones).
	classConvVolume16 = "conv-volume-float16"
	classGEMMLongK16  = "gemm-long-k-float16"
	classElem         = "elementwise"
	classCast         = "cast"
	// The two above where a bfloat16 tensor is read or written: ONNX
	// Runtime's CUDA kernels move bfloat16 at a fraction of float16's rate.
	classElemBF16 = "elementwise-bfloat16"
	classCastBF16 = "cast-bfloat16"
	// An element-wise op the CUDA provider runs with its general
	// broadcast kernel (cudaform.GeneralBroadcast), whatever its types.
	classElemBroadcast = "elementwise-broadcast"
	classReduce        = "reduce"       // ONNX Runtime's own reduction kernel
	classReduceDNN     = "reduce-cudnn" // reductions cuDNN runs
	classNorm          = "norm"         // BatchNormalization and the other normalisations
	classNormLow       = "norm-float16" // a float16 BatchNormalization (precision.LowBatchNorms)
	classTranspose     = "transpose"
	classCopy          = "copy"  // Concat, Pad, Identity, Expand, Gather...
	classSlice         = "slice" // strided copies
	classPool          = "pool"
	classScatter       = "scatter"
	classSoftmax       = "softmax"
)

// efficiency is a class's fraction of the peak FLOP/s and of the memory
// bandwidth its kernels reach, and what each call costs beyond its work
// and LaunchSeconds (extra kernels and scratch set-up ONNX Runtime runs
// for one node), in seconds.
type efficiency struct{ compute, memory, perCall float64 }

// efficiencies were fitted on ONNX Runtime's profile of ortrain 1cb87fb's
// ResNet-50 step (224², batch 256, 16-mixed, SGD momentum 0.9) on an H200
// with ONNX Runtime 1.29's CUDA provider, every launch synchronous
// (CUDA_LAUNCH_BLOCKING=1) so that each node's time is its kernels' and not
// whichever launch the host waited in: training/plan/testdata/
// profile-1cb87fb.tsv, per op, less a synchronisation cost per call that
// brings the profile's 256.4 ms to the step's 200.1 ms of device time
// (229.6 ms measured, 29.5 on the host). For each class, the measured time
// less LaunchSeconds per call divided into the time at the peak. The
// volumes' classes (3-D convolutions, long-K GEMMs, and Slices, which
// ResNet-50 hardly has) were fitted the same way on the VQ-GAN preset's
// profile (2549438); the float16 volumes' classes, the bfloat16
// element-wise ones and the scatters on three profiles of 2026-11-26's
// evening (ResNet-50 and the diffusion LM at batch 128 of 8166935, the
// VQ-GAN in 16-mixed of c75eebf). TestStepTimeCalibration keeps each
// profiled step within 15%. Earlier profiles timed launches that waited
// for the GPU rather than kernels: their per-op tables put 177 ms in
// Conv, 15.7 ms measured synchronously.
var efficiencies = map[string]efficiency{
	classConv:  {compute: 0.18, memory: 0.5},
	classConvT: {compute: 0.19, memory: 0.5},
	// The ops form's weight-gradient Conv, last profiled with launches
	// that waited (0380ec6): not refitted.
	classConvWgrad: {compute: 0.008, memory: 0.5},
	// The VQ-GAN preset's step in the ops form (batch 1, recompute blocks,
	// 2549438's graph on an H200): 16,565 ms measured, its other kernels
	// priced as below (2,167 ms) leave 14,398 ms to its 55 3-D weight
	// gradients.
	classConvWgradVolume: {compute: 0.0032, memory: 0.5},
	// memory: the VQ-GAN's batched weight-gradient GEMMs in float16 below
	// moved 649 GB in 158 ms (0.85 of the bandwidth).
	classGEMM: {compute: 0.45, memory: 0.85},
	// Fitted on the VQ-GAN preset's synchronous profile (batch 1,
	// bf16-mixed, ortrain 2549438, H200; testdata/profile-2549438-vqgan3d.tsv):
	// its 111 float32 3-D Convs (TF32) took 1,189 ms, the largest 44 ms for
	// 1.86 TFLOP (8.5% of TF32's peak). The weight gradients' GEMMs of a
	// convolution the device runs in float32 ran in float32 too (TF32)
	// before precision.ExactLowProducts gave them the low type:
	// c75eebf's 666, 243 of them 68.7 GFLOP over 2^16 voxels each, took
	// 954 ms in bf16-mixed (testdata/profile-c75eebf-vqgan3d-bf16.tsv), 4
	// % of TF32's peak. (2549438's file prices its long-K GEMMs, K over
	// 2^20, at the tensor cores' rate, as plan then typed them: 522 ms
	// at this efficiency against 674 measured.)
	classConvVolume: {compute: 0.08, memory: 0.5},
	classGEMMLongK:  {compute: 0.04, memory: 0.5},
	// The same preset in 16-mixed (ortrain c75eebf's graph;
	// testdata/profile-vqgan3d-16-mixed.tsv):
	// its 111 float16 3-D Convs took 213 ms, 5.6 times faster than in
	// TF32, and its 666 weight-gradient GEMMs (K 2^16 voxels, batched over
	// the depth; 649 GB moved) 158 ms, at any GEMM's rates, where
	// bf16-mixed's float32 ones took 954.
	classConvVolume16: {compute: 0.22, memory: 0.5},
	classGEMMLongK16:  {compute: 0.45, memory: 0.85},
	classElem:         {compute: 0.5, memory: 0.82},
	classCast:         {compute: 0.5, memory: 0.88},
	// Fitted on the diffusion LM's synchronous profile at batch 128
	// (bf16-mixed, ortrain 8166935; testdata/profile-8166935-bd3lm-b128.tsv),
	// its broadcasts over more than one axis apart (classElemBroadcast):
	// its Muls, nearly all bfloat16, took 204.4 ms, priced 203.4. Its
	// bfloat16 [128, 1024, 3072] products ran at 0.64 of the bandwidth,
	// their scalings by a constant at 0.48.
	classElemBF16: {compute: 0.5, memory: 0.55},
	classCastBF16: {compute: 0.5, memory: 0.4},
	// The general broadcast kernel divides each element's index once per
	// axis and goes by the element: in the same profile the attention's
	// mask Add, bfloat16 [128, 12, 1024, 1024] plus [1024, 1024], took
	// 4.95 ms (1.3 TB/s) and the softmax gradient's float32 scores less
	// their row sums [128, 12, 1024, 1] 3.94 ms, 3.3 and 4.1·10¹¹ elements
	// a second, where the per-channel kernel added a bias to bfloat16
	// [128, 1024, 3072] at 4.7·10¹¹. Priced by the element (one FLOP
	// each) at 0.0055 of the float32 rate: 4.4 ms for either.
	classElemBroadcast: {compute: 0.0055, memory: 0.82},
	// ONNX Runtime's own reduction kernel (after cudaform.SplitReductions,
	// every per-channel statistic): 430 calls, 28.4 ms.
	classReduce: {compute: 0.5, memory: 0.25},
	// cuDNN's reductions: NCHW's per-channel {0, 2, 3} at 0.22 TB/s (3.75
	// ms for 822 MB) in 2d1aa0c's synchronous profile.
	classReduceDNN: {compute: 0.5, memory: 0.046},
	classNorm:      {compute: 0.5, memory: 0.38},
	// Not yet profiled: priced at the float32 kernel's rates, plus the
	// four Casts of the per-channel inputs to float32 the CUDA provider
	// launches for cuDNN. A graph built emulated (on a CPU) also lacks
	// the per-layer Casts of the batch mean and variance to float16 that
	// the device's build has (about 1 ms in ResNet-50's step, not priced).
	classNormLow:   {compute: 0.5, memory: 0.38, perCall: 4 * LaunchSeconds},
	classTranspose: {compute: 0.5, memory: 0.57},
	// Copies and Slices are priced at 4 bytes an element (copyBytes):
	// ResNet-50's float16 im2col Gathers and the VQ-GAN's float32 ones in
	// bf16-mixed ran at 0.34 of the bandwidth so counted, and the VQ-GAN's
	// 709 Slices (its volumes' kernel offsets for the weight gradients;
	// ResNet-50's three tell nothing), 1,322 GB a step so counted, at 0.69
	// in float16 and in float32 (the 16-mixed and bf16-mixed profiles of
	// c75eebf's graph).
	classCopy:  {compute: 0.5, memory: 0.34},
	classSlice: {compute: 0.5, memory: 0.69},
	classPool:  {compute: 0.5, memory: 0.17},
	// ScatterElements copies its data input whole, then adds the updates:
	// ResNet-50's loss gradient, 2.16 GB moved, took 1.21 ms (8166935's
	// profile). A ScatterND adding many updates into one row (an
	// embedding's gradient, where a token repeats) waits on its atomics,
	// which this does not price: the diffusion LM's, 310 MB, took 28.7 ms.
	classScatter: {compute: 0.5, memory: 0.37},
	classSoftmax: {compute: 0.5, memory: 0.5},
}

// LaunchSeconds is the time a kernel costs beyond its work: the launch
// and the gap before the next on the stream. Fitted with the
// efficiencies (the many tiny kernels of the profiles).
const LaunchSeconds = 8e-6

// CPUNodeSeconds is the host time of a node ONNX Runtime runs on the CPU
// (shape arithmetic from Shape outputs), with its copy to the device:
// measured 0.5 ms per 54 ReduceProd and per 54 Gather calls in the 0380ec6
// profile.
const CPUNodeSeconds = 10e-6

// HostSecondsPerByte is the trainer's host time per step per byte of the
// batch, outside ONNX Runtime's runs and not hidden behind the step before
// (the step's scalars, the loss read back, what binding the batch staged
// beside that step still costs): 0.6 ms for ResNet-50's batch of 256
// float32 224² images and labels (ortrain bench on an H200, 8166935, the
// batch loaded beside the step by the trainer's aheadLoader; 29.5 ms at
// 1cb87fb, before it), taken as proportional to the batch's bytes.
const HostSecondsPerByte = 0.6e-3 / (256 * (3*224*224*4 + 8))

// StepTime is a training step's predicted time on a GPU.
type StepTime struct {
	GPU   GPU   `json:"gpu"`
	Batch int64 `json:"batch"`
	// StepMS is KernelMS + HostMS: one batch through the training graph
	// and one optimizer update (with accumulate_grad_batches k, the update
	// runs once per k steps; OptimizerMS is its share once).
	StepMS float64 `json:"step_ms"`
	// KernelMS is the device's time: every kernel's work at its class's
	// efficiency plus LaunchSeconds each; LaunchMS is the launches' part.
	KernelMS    float64 `json:"kernel_ms"`
	LaunchMS    float64 `json:"launch_ms"`
	TrainingMS  float64 `json:"training_ms"`
	OptimizerMS float64 `json:"optimizer_ms"`
	// HostMS is the host's part: the trainer's per-step work and the
	// nodes ONNX Runtime runs on the CPU.
	HostMS float64 `json:"host_ms"`
	// Kernels is the device kernels per step; CPUNodes the nodes on the
	// host; Elided the nodes that launch nothing (views, folded constants,
	// Casts ONNX Runtime removes, Transposes fused into MatMuls).
	Kernels  int `json:"kernels"`
	CPUNodes int `json:"cpu_nodes"`
	Elided   int `json:"elided"`
	// Ops is the predicted time by op type, the largest first.
	Ops []OpTime `json:"ops"`
	// Float16 is the same step in 16-mixed, for a bf16-mixed one with
	// convolutions (PredictStep); nil otherwise.
	Float16 *StepTime `json:"float16,omitempty"`
	// Larger is the step at a larger batch, for a step that launches take
	// most of (PredictStep); nil otherwise.
	Larger *StepTime `json:"larger_batch,omitempty"`
}

// launchBound reports whether launches take more than share of the step.
func (st *StepTime) launchBound(share float64) bool { return st.LaunchMS > share*st.StepMS }

// convs sums the step's Conv and ConvTranspose ops.
func (st *StepTime) convs() (sum struct {
	calls int
	ms    float64
}) {
	for _, op := range st.Ops {
		if op.Op == "Conv" || op.Op == "ConvTranspose" {
			sum.calls += op.Calls
			sum.ms += op.MS
		}
	}
	return sum
}

// OpTime is one op type's predicted share of a step.
type OpTime struct {
	Op    string  `json:"op"`
	Calls int     `json:"calls"`
	MS    float64 `json:"ms"`
	GFLOP float64 `json:"gflop"`
	GB    float64 `json:"gb"`
}

// StepOptions say how the step runs.
type StepOptions struct {
	// TF32 runs float32 matrix products on TF32 tensor cores
	// (runtime.use_tf32, on by default).
	TF32 bool
	// HostBytes is the batch's bytes per step on the host; 0 takes the
	// training graph's data inputs at the batch.
	HostBytes int64

	low  dtype.DType     // the artifacts' low precision; 0 for float32
	data map[string]bool // the training graph's data inputs
}

// PredictArtifacts predicts the step of the artifacts in dir at batch on
// gpu: the training graph at the batch and the optimizer graph, costed
// node by node as ONNX Runtime's CUDA provider would run them.
func PredictArtifacts(dir string, batch int64, gpu GPU, o StepOptions) (*StepTime, error) {
	train, opt, o, err := loadStep(dir, batch, o)
	if err != nil {
		return nil, err
	}
	st := Predict(train, opt, gpu, o)
	st.Batch = batch
	return st, nil
}

// loadStep reads the artifacts in dir for a prediction: the training graph
// with its shapes at batch, the optimizer graph, and o completed with the
// data inputs, the batch's host bytes and the low precision.
func loadStep(dir string, batch int64, o StepOptions) (train, opt *graph.Graph, _ StepOptions, _ error) {
	m, err := artifacts.Load(dir)
	if err != nil {
		return nil, nil, o, err
	}
	g, err := graph.Load(filepath.Join(dir, artifacts.TrainingFile))
	if err != nil {
		return nil, nil, o, err
	}
	dims := map[string]int64{"": batch}
	for _, d := range m.Data {
		if len(d.Symbolic) > 0 && d.Symbolic[0] != "" {
			dims[d.Symbolic[0]] = batch
		}
	}
	train, err = memplan.Concrete(g, dims)
	if err != nil {
		return nil, nil, o, fmt.Errorf("%s: %v (only the batch dimension may be symbolic)", dir, err)
	}
	opt, err = graph.Load(filepath.Join(dir, artifacts.OptimizerFile))
	if err != nil {
		return nil, nil, o, err
	}
	o.data = map[string]bool{}
	for _, d := range m.Data {
		o.data[d.Name] = true
		if o.HostBytes == 0 {
			o.HostBytes += valueBytes(train, d.Name)
		}
	}
	o.low = lowType(m)
	return train, opt, o, nil
}

// Predict costs one run of train (concrete shapes) and one of opt on gpu.
func Predict(train, opt *graph.Graph, gpu GPU, o StepOptions) *StepTime {
	var costs [2][]nodeCost
	for i, g := range []*graph.Graph{train, opt} {
		if g != nil {
			costs[i] = costGraph(g, gpu, o)
		}
	}
	return predictCosts(costs, gpu, o.HostBytes)
}

// predictCosts sums the training graph's and the optimizer's node costs
// into a step, with hostBytes of batch for the host's part.
func predictCosts(costs [2][]nodeCost, gpu GPU, hostBytes int64) *StepTime {
	st := &StepTime{GPU: gpu}
	ops := map[string]*OpTime{}
	for i, cs := range costs {
		var sum float64
		for _, c := range cs {
			switch c.where {
			case onCPU:
				st.CPUNodes++
				st.HostMS += CPUNodeSeconds * 1e3
				continue
			case elided:
				st.Elided++
				continue
			}
			st.Kernels++
			sum += c.seconds * 1e3
			st.LaunchMS += LaunchSeconds * 1e3
			op := ops[c.op]
			if op == nil {
				op = &OpTime{Op: c.op}
				ops[c.op] = op
			}
			op.Calls++
			op.MS += c.seconds * 1e3
			op.GFLOP += c.flops / 1e9
			op.GB += c.bytes / 1e9
		}
		if i == 0 {
			st.TrainingMS = sum
		} else {
			st.OptimizerMS = sum
		}
	}
	st.KernelMS = st.TrainingMS + st.OptimizerMS
	st.HostMS += float64(hostBytes) * HostSecondsPerByte * 1e3
	st.StepMS = st.KernelMS + st.HostMS
	for _, op := range ops {
		st.Ops = append(st.Ops, *op)
	}
	sort.Slice(st.Ops, func(i, j int) bool {
		if st.Ops[i].MS != st.Ops[j].MS {
			return st.Ops[i].MS > st.Ops[j].MS
		}
		return st.Ops[i].Op < st.Ops[j].Op
	})
	return st
}

type placement int

const (
	onGPU placement = iota
	onCPU
	elided
)

// nodeCost is one node's predicted cost.
type nodeCost struct {
	op           string
	where        placement
	class        string  // efficiency class (onGPU only)
	rate         float64 // the peak FLOP/s its work runs at
	flops, bytes float64
	seconds      float64 // kernelSeconds
}

// kernelSeconds is a kernel's predicted time: its FLOPs at rate and its
// bytes at the bandwidth, each at class's efficiency, whichever is
// longer, plus the class's fixed cost per call and LaunchSeconds.
func kernelSeconds(class string, rate, flops, bytes float64, gpu GPU) float64 {
	e := efficiencies[class]
	return max(flops/(rate*e.compute), bytes/(gpu.Bandwidth*e.memory)) + e.perCall + LaunchSeconds
}

// views share their input's buffer: ONNX Runtime launches nothing.
var views = map[string]bool{"Reshape": true, "Squeeze": true, "Unsqueeze": true, "Flatten": true}

// shapeOps make or take shape vectors; ONNX Runtime's CUDA provider
// leaves them (and arithmetic on their outputs) on the CPU.
var shapeOps = map[string]bool{"Shape": true, "Size": true}

// costGraph costs g's nodes as ONNX Runtime's CUDA provider runs them
// after its graph optimizations (ORT_ENABLE_ALL): nodes of constants only
// are folded; nodes computing from Shape outputs and constants run on the
// CPU; views launch nothing; a Cast to its input's type is removed
// (CastElimination); emulated mixed precision is priced as the device's
// low-precision kernels run it (roundingPairs); a Transpose of the last two axes read only by a MatMul is fused into it
// (FusedMatMul), and so is a scale by a constant scalar of a MatMul's
// operand or product (MatMulScaleFusion).
func costGraph(g *graph.Graph, gpu GPU, o StepOptions) []nodeCost {
	consumers, producers := g.Consumers(), g.Producers()
	constant := map[string]bool{} // known before the run: folded
	shapeLike := map[string]bool{}
	for name := range g.Initializers {
		constant[name] = true
	}
	lowVal, removedCasts := lowTyping(g, o.data, o.low)
	fused := fusedTranspose(g, consumers)
	for n := range fusedScales(g, consumers, removedCasts) {
		fused[n] = true
	}
	biasOf := fusedBiases(g, consumers, removedCasts, lowVal, o.low)
	outputs := g.OutputSet()
	for _, add := range biasOf {
		fused[add] = true
	}
	var out []nodeCost
	for _, n := range g.Nodes {
		c := nodeCost{op: n.Op}
		allConst, fromShape := true, false
		for _, in := range n.Inputs {
			if in == "" {
				continue
			}
			if !constant[in] && !shapeLike[in] {
				allConst = false
			}
			fromShape = fromShape || shapeLike[in]
		}
		switch {
		case n.Op == "Constant" || (allConst && !fromShape && len(n.Inputs) > 0):
			for _, v := range n.Outputs {
				constant[v] = true
			}
			c.where = elided
		case shapeOps[n.Op] || (allConst && fromShape):
			for _, v := range n.Outputs {
				shapeLike[v] = true
			}
			c.where = onCPU
			if shapeOps[n.Op] {
				c.where = elided // reads only the input's dimensions
			}
		case views[n.Op] || removedCasts[n] || fused[n] || n.Op == "Cast" && g.Info(n.Input(0)).DType == dtype.DType(n.Int("to", 0)):
			c.where = elided
		default:
			c.flops, c.bytes = work(g, n, lowVal, o.low)
			c.class = classOf(g, n)
			c.rate = gpu.FP32
			if productClass[c.class] {
				c.rate = productRate(g, n, gpu, o, lowVal)
				// A long-K GEMM on the tensor cores in bfloat16 (a
				// convolution's weight gradient precision.ExactLowProducts
				// gave the low type) is priced as float16's: 0.04 is what
				// TF32 ran those at; bfloat16 ones were never profiled.
				if c.rate == gpu.Tensor16 && (o.low == dtype.Float16 || g.Info(n.Input(0)).DType == dtype.Float16 || c.class == classGEMMLongK) {
					c.class = float16Class[c.class]
				}
			}
			if n.Op == "Softmax" && lowVal[n.Output(0)] && g.Info(n.Output(0)).DType == dtype.Float32 {
				// Built emulated: its readers but the Casts to low read, on
				// the device, a float32 copy made for them, priced here
				// (its launch not: a few per step); its gradient's product
				// reads the low P there (precision.LowSoftmaxGrads).
				var rest float64
				for _, r := range consumers[n.Output(0)] {
					if !precision.IsCast(r, o.low) && !precision.SoftmaxGradTo(producers, consumers, outputs, r, o.low) {
						rest++
					}
				}
				if elems := float64(deviceBytes(g, n.Output(0), lowVal, o.low)) / float64(o.low.Size()); rest > 0 {
					c.bytes += elems * (float64(o.low.Size()) + 4 + 2*rest)
				}
			}
			if add := biasOf[n]; add != nil {
				// BiasSoftmax reads the scores and the bias the Add did.
				for _, in := range add.Inputs {
					c.bytes += float64(deviceBytes(g, in, lowVal, o.low))
				}
				c.bytes -= float64(deviceBytes(g, add.Outputs[0], lowVal, o.low))
			}
			if c.class == classNorm && n.Op == "BatchNormalization" && (lowVal[n.Output(0)] || g.Info(n.Input(0)).DType == dtype.Float16) {
				c.class = classNormLow
			}
			if (c.class == classElem || c.class == classCast) && touchesBF16(g, n, lowVal, o.low) {
				c.class = bfloat16Class[c.class]
			}
			// A bfloat16 mask Add a Softmax reads is float32 in a graph
			// built emulated, which leaves it for the BiasSoftmaxFusion
			// float32 would get; the device's build flattens it.
			if (c.class == classElem || c.class == classElemBF16) && cudaform.GeneralBroadcast(g, n) &&
				!(c.class == classElemBF16 && cudaform.LeftForBiasSoftmax(g, n, consumers, outputs) && cudaform.Flattenable(g, n)) {
				c.class = classElemBroadcast
			}
			if c.class == classSlice || c.class == classCopy {
				// ONNX Runtime's strided copies go by the element, not
				// the byte: the VQ-GAN's 709 Slices took 416 ms in
				// float16 and 422 in float32.
				c.bytes = copyBytes(g, n)
			}
			c.seconds = kernelSeconds(c.class, c.rate, c.flops, c.bytes, gpu)
		}
		out = append(out, c)
	}
	return append(out, lowParamCasts(g, lowVal, o.low, gpu)...)
}

// lowParamCasts prices the Casts a device's build adds for the
// per-channel inputs of the normalisations that a graph built for a CPU
// runs in float32 and the device in the low type (lowTyping):
// precision.LowBatchNorms casts each computed vector once (a layer's batch
// statistics, its backward's scale and shift) and the graph's own
// (scales, shifts, fills) together, one Concat, Cast and Split;
// precision.LowRowStatistics casts each scale once. None for a graph
// built with the device's kernels, which has them as nodes.
func lowParamCasts(g *graph.Graph, lowVal map[string]bool, low dtype.DType, gpu GPU) []nodeCost {
	if low == 0 {
		return nil
	}
	producers := g.Producers()
	seen := map[string]bool{}
	var out []nodeCost
	together := 0.0 // elements of the graph's own vectors, cast as one
	cast := func(v string) {
		if v == "" || seen[v] || g.Info(v).DType != dtype.Float32 {
			return
		}
		seen[v] = true
		elems := float64(valueBytes(g, v)) / 4
		if producers[v] == nil && g.Info(v).Rank() == 1 {
			together += elems
			return
		}
		bytes := elems * float64(4+low.Size())
		out = append(out, nodeCost{op: "Cast", class: classCast, rate: gpu.FP32, bytes: bytes, seconds: kernelSeconds(classCast, gpu.FP32, 0, bytes, gpu)})
	}
	for _, n := range g.Nodes {
		if (n.Op != "BatchNormalization" && n.Op != "LayerNormalization") || n.Domain != "" || !lowVal[n.Outputs[0]] ||
			g.Info(n.Input(0)).DType != dtype.Float32 {
			continue
		}
		for _, v := range n.Inputs[1:] {
			cast(v)
		}
	}
	if together > 0 {
		for _, k := range []struct {
			op, class string
			bytes     float64
		}{{"Concat", classCopy, 8 * together}, {"Cast", classCast, together * float64(4+low.Size())}, {"Split", classCopy, 8 * together}} {
			out = append(out, nodeCost{op: k.op, class: k.class, rate: gpu.FP32, bytes: k.bytes, seconds: kernelSeconds(k.class, gpu.FP32, 0, k.bytes, gpu)})
		}
	}
	return out
}

// copyBytes is what a copy kernel is priced by: 4 bytes for every element
// it reads and writes, whatever their type. A gather reads of its data
// only the elements it writes, at most all of them: the cross-entropy's
// GatherElements, one element of each [rows, 50,258] row of log-probabilities,
// is priced by its rows (it was by the whole tensor, 8 ms of the diffusion
// LM's step at batch 128, in a profile whose ops outside its named ones
// took 33 ms against 57 so priced).
func copyBytes(g *graph.Graph, n *graph.Node) float64 {
	var elems int64
	for _, vs := range [][]string{n.Inputs, n.Outputs} {
		for _, v := range vs {
			if info := g.Info(v); v != "" && info.Static() {
				elems += dtype.Numel(info.Shape)
			}
		}
	}
	if gathers[n.Op] && n.Domain == "" {
		data, out := g.Info(n.Input(0)), g.Info(n.Output(0))
		if data.Static() && out.Static() {
			elems -= max(0, dtype.Numel(data.Shape)-dtype.Numel(out.Shape))
		}
	}
	return 4 * float64(elems)
}

// gathers copy elements of their first input picked by their second.
var gathers = map[string]bool{"Gather": true, "GatherElements": true, "GatherND": true}

// bfloat16Class is the class of an element-wise op or Cast that reads or
// writes bfloat16 on the device.
var bfloat16Class = map[string]string{classElem: classElemBF16, classCast: classCastBF16}

// touchesBF16 reports whether n reads or writes a bfloat16 value on the
// device: one of the graph's own, or a low value of a bf16-mixed build.
func touchesBF16(g *graph.Graph, n *graph.Node, lowVal map[string]bool, low dtype.DType) bool {
	for _, vs := range [][]string{n.Inputs, n.Outputs} {
		for _, v := range vs {
			if v != "" && (g.Info(v).DType == dtype.BFloat16 || low == dtype.BFloat16 && lowVal[v]) {
				return true
			}
		}
	}
	return n.Op == "Cast" && dtype.DType(n.Int("to", 0)) == dtype.BFloat16
}

// lacksBF16 are the matrix products ONNX Runtime's CUDA provider has no
// bfloat16 kernel for (its Conv and ConvTranspose register float, double
// and float16): in a bf16-mixed run they stay emulated, float32 kernels
// between rounding Casts, as the probe finds.
var lacksBF16 = map[string]bool{"Conv": true, "ConvTranspose": true}

// emulatedOn reports whether the device runs product n in float32 on
// rounded values rather than in low.
func emulatedOn(n *graph.Node, low dtype.DType) bool {
	return low == dtype.BFloat16 && lacksBF16[n.Op]
}

// lowTyping replays precision.Autocast's typing with the low-precision
// kernels present (but lacksBF16), over a graph built where they were emulated (every
// ortrain build on a CPU): low[v] when the device would hold v in the low
// type. A product reads and writes the low type; a Follow op whose float
// activations are all low (or float32 copies of low values) runs low; a
// Cast to float32 of a low value is a kernel only where a float32 op reads
// it; a Cast to the low type of a low value is none; a float16 BatchNorm
// between such Casts, and a Softmax of a low value that a Cast to the low
// type reads, read and write the low type (as precision.LowBatchNorms and
// LowSoftmaxes build them for the device). Graphs built with the
// kernels have their types already and pass through unchanged.
func lowTyping(g *graph.Graph, data map[string]bool, low dtype.DType) (lowVal map[string]bool, elide map[*graph.Node]bool) {
	lowVal, elide = map[string]bool{}, map[*graph.Node]bool{}
	if low == 0 {
		return lowVal, elide
	}
	consumers, producers, outputs := g.Consumers(), g.Producers(), g.OutputSet()
	// lowBN: a BatchNormalization precision.LowBatchNorms gives the low
	// type on the device (float16 only: the CUDA provider has no bfloat16
	// BatchNorm), reading the low value its float32 copy was made from.
	lowBN := func(n *graph.Node) bool {
		if low != dtype.Float16 {
			return false
		}
		_, readers, ok := precision.LowBatchNorm(g, producers, consumers, outputs, n)
		return ok && dtype.DType(readers[0].Int("to", 0)) == low
	}
	// gradW: the first BatchNormalization of a BatchNorm backward's
	// element-wise part (precision.LowBatchNormGrad), and gradF the last:
	// where both the input's and the gradient's float32 values are low
	// values on the device, its build runs the part in the low type.
	gradW, gradF := map[*graph.Node]*graph.Node{}, map[*graph.Node]bool{}
	if low == dtype.Float16 {
		for _, n := range g.Nodes {
			if m, ok := precision.LowBatchNormGrad(g, producers, consumers, outputs, n); ok && dtype.DType(m.Readers[0].Int("to", 0)) == low {
				gradW[m.W] = n
			}
		}
	}
	// lowStats: the LayerNormalizations that compute BatchNorm statistics
	// over a float32 copy of a low value, which the device's build runs on
	// the low value (precision.LowRowStatistics).
	// A BatchNorm backward's g·x̂/8 that such a LayerNormalization reads
	// runs low there too, and so x̂/8 (precision.LowBatchNorms normalises
	// the low input, whose float32 copy is priced below): rowProduct
	// holds those products.
	lowStats, rowProduct := map[*graph.Node]bool{}, map[*graph.Node]bool{}
	for _, n := range g.Nodes {
		if _, ok := precision.RowStatistics(g, producers, consumers, outputs, n, low); ok {
			lowStats[n] = true
		} else if m := precision.RowProduct(g, producers, consumers, outputs, n); m != nil && low == dtype.Float16 {
			lowStats[n], rowProduct[m] = true, true
		}
	}
	// rowFactor: x̂/8, an inference BatchNorm over a float32 copy of a low
	// value that only such products read.
	rowFactor := func(n *graph.Node) bool {
		rs := consumers[n.Outputs[0]]
		return n.Op == "BatchNormalization" && len(rs) > 0 && !outputs[n.Outputs[0]] &&
			!slices.ContainsFunc(rs, func(r *graph.Node) bool { return !rowProduct[r] })
	}
	activation := map[string]bool{}
	for v := range data {
		activation[v] = true
	}
	up := map[string]bool{} // float32 copies of low values
	// emulatedFrom: low values whose float32 copy a product the device
	// lacks the low kernel for reads.
	emulatedFrom := map[string]bool{}
	for _, n := range g.Nodes {
		if n.Op == "Cast" && dtype.DType(n.Int("to", 0)) == dtype.Float32 &&
			slices.ContainsFunc(consumers[n.Outputs[0]], func(r *graph.Node) bool { return emulatedOn(r, low) }) {
			emulatedFrom[n.Input(0)] = true
		}
	}
	// lowChain: the values a product reads that ops moving values made from
	// float32 copies of low values, the weight gradients of convolutions
	// the device runs in float32: precision.ExactLowProducts writes them
	// again over the low values on the device, and the product runs low.
	lowChain := map[string]bool{}
	for _, n := range g.Nodes {
		if (n.Op != "MatMul" && n.Op != "Gemm") || n.Domain != "" || len(n.Inputs) < 2 || n.Input(2) != "" || len(n.Outputs) != 1 ||
			g.Info(n.Outputs[0]).DType != dtype.Float32 || outputs[n.Outputs[0]] ||
			slices.ContainsFunc(consumers[n.Outputs[0]], func(r *graph.Node) bool { return precision.IsCast(r, low) }) {
			continue
		}
		var chains []*graph.Node
		exact := true
		for _, in := range n.Inputs[:2] {
			_, chain, ok := precision.ExactLowOrigin(g, producers, in, low)
			exact = exact && ok && g.Info(in).DType == dtype.Float32
			chains = append(chains, chain...)
		}
		for _, q := range chains {
			lowChain[q.Outputs[0]] = exact
		}
	}
	for _, n := range g.Nodes {
		act := false
		for _, in := range n.Inputs {
			act = act || activation[in]
		}
		for _, o := range n.Outputs {
			activation[o] = act
		}
		switch {
		case n.Op == "Cast":
			to, from := dtype.DType(n.Int("to", 0)), n.Input(0)
			isLow := lowVal[from] || g.Info(from).DType == low
			switch {
			case to == low && isLow:
				elide[n] = true
				lowVal[n.Outputs[0]] = true
			case to == low:
				lowVal[n.Outputs[0]] = true
			case to == dtype.Float32 && isLow && emulatedFrom[from]:
				// The rounded input of a convolution the device runs in
				// float32 (or the recompute's copy of it): a float32 value
				// there; the weight gradient's GEMMs read the low value
				// instead (lowChain).
			case to == dtype.Float32 && isLow:
				lowVal[n.Outputs[0]], up[n.Outputs[0]] = true, true
				needed := false
				for _, r := range consumers[n.Outputs[0]] {
					needed = needed || (precision.ClassOf(r) == precision.FP32 && !lowBN(r) && !lowStats[r])
				}
				elide[n] = !needed
			}
		case n.Op == "BatchNormalization" && up[n.Input(0)] && lowBN(n):
			lowVal[n.Outputs[0]] = true
		case n.Op == "BatchNormalization" && up[n.Input(0)] && rowFactor(n):
			lowVal[n.Outputs[0]] = true
		case lowStats[n] && lowVal[n.Input(0)]:
			lowVal[n.Outputs[0]] = true
		case gradW[n] != nil && up[n.Input(0)]:
			// The sum after it (a Follow op) is low where the gradient
			// is; the last BatchNormalization then is too.
			gradF[gradW[n]] = true
			lowVal[n.Outputs[0]] = true
		case gradF[n] && lowVal[n.Input(0)]:
			lowVal[n.Outputs[0]] = true
		case n.Op == "Softmax" && lowVal[n.Input(0)] && slices.ContainsFunc(consumers[n.Outputs[0]], func(r *graph.Node) bool { return precision.IsCast(r, low) }):
			// precision.LowSoftmaxes: the device's build runs it low.
			lowVal[n.Outputs[0]] = true
		case precision.ClassOf(n) == precision.Low:
			// A product runs low where it reads a low value: one reading
			// only float32 ones (an emulated convolution's gradient) runs
			// in float32 on the device too.
			reads := slices.ContainsFunc(n.Inputs, func(in string) bool { return lowVal[in] })
			for _, o := range n.Outputs {
				lowVal[o] = g.Info(o).Float() && !emulatedOn(n, low) && reads
			}
		case precision.ClassOf(n) == precision.FP32 && strings.HasPrefix(n.Name, artifacts.GradientPrefix) && readsLowOnly(n, activation, lowVal, up):
			// A float32 op autodiff wrote over low values (a GELU's or a
			// softmax's gradient): autocast typed only the forward's, so
			// on the device it runs in the low type of what it reads. A
			// forward one reads float32 there, whatever computed its input
			// on the CPU: autocast casts it up.
			for _, o := range n.Outputs {
				lowVal[o] = g.Info(o).Float()
			}
		case precision.ClassOf(n) == precision.Follow:
			sawLow, sawFull := false, false
			for _, in := range n.Inputs {
				if in == "" || !activation[in] || !g.Info(in).Float() {
					continue
				}
				if lowVal[in] {
					sawLow = true
				} else {
					sawFull = true
				}
			}
			for _, o := range n.Outputs {
				lowVal[o] = sawLow && !sawFull && g.Info(o).Float() || lowChain[o]
			}
		}
	}
	return lowVal, elide
}

// readsLowOnly reports whether every float activation n reads is a low
// value other than a float32 copy made for a float32 reader (up), and n
// reads one.
func readsLowOnly(n *graph.Node, activation, lowVal, up map[string]bool) bool {
	seen := false
	for _, in := range n.Inputs {
		if in == "" || !activation[in] {
			continue
		}
		if !lowVal[in] || up[in] {
			return false
		}
		seen = true
	}
	return seen
}

// fusedTranspose finds Transposes of the last two axes read by one MatMul
// alone, which ONNX Runtime folds into a FusedMatMul.
func fusedTranspose(g *graph.Graph, consumers map[string][]*graph.Node) map[*graph.Node]bool {
	fused := map[*graph.Node]bool{}
	for _, n := range g.Nodes {
		if n.Op != "Transpose" || len(n.Outputs) == 0 {
			continue
		}
		rs := consumers[n.Outputs[0]]
		perm := n.Ints("perm")
		if len(rs) != 1 || rs[0].Op != "MatMul" || len(perm) < 2 {
			continue
		}
		swap := true
		r := len(perm)
		for i, p := range perm {
			want := int64(i)
			if i == r-2 {
				want = int64(r - 1)
			} else if i == r-1 {
				want = int64(r - 2)
			}
			swap = swap && p == want
		}
		fused[n] = swap
	}
	return fused
}

// fusedBiases finds the Adds ONNX Runtime's BiasSoftmaxFusion folds into
// the Softmax that alone reads them (cudaform.FusesIntoSoftmax; looking
// through the rounding Casts the device would not run), keyed by that
// Softmax: a float16 or float32 attention's mask add is no kernel of its
// own.
func fusedBiases(g *graph.Graph, consumers map[string][]*graph.Node, elided map[*graph.Node]bool, lowVal map[string]bool, low dtype.DType) map[*graph.Node]*graph.Node {
	outputs := g.OutputSet()
	fused := map[*graph.Node]*graph.Node{}
	for _, n := range g.Nodes {
		if n.Op != "Add" || n.Domain != "" || len(n.Outputs) != 1 {
			continue
		}
		reader := soleReader(n.Outputs[0], consumers, elided, outputs)
		dt := g.Info(n.Outputs[0]).DType
		if lowVal[n.Outputs[0]] {
			dt = low
		}
		if reader != nil && cudaform.FusesIntoSoftmax(g, n, reader, dt) {
			fused[reader] = n
		}
	}
	return fused
}

// soleReader follows v down through elided Casts, each read by one node,
// to its one reader; nil where a value on the way is read by more or none,
// or is among outputs.
func soleReader(v string, consumers map[string][]*graph.Node, elided map[*graph.Node]bool, outputs map[string]bool) *graph.Node {
	for !outputs[v] && len(consumers[v]) == 1 {
		r := consumers[v][0]
		if !elided[r] {
			return r
		}
		v = r.Outputs[0]
	}
	return nil
}

// fusedScales finds the Muls and Divs by a constant scalar that ONNX
// Runtime's MatMulScaleFusion folds into a FusedMatMul's alpha: of a
// MatMul's product read by the scale alone, or of an operand read by the
// MatMul alone (looking through the rounding Casts the device would not
// run).
func fusedScales(g *graph.Graph, consumers map[string][]*graph.Node, elided map[*graph.Node]bool) map[*graph.Node]bool {
	producers := g.Producers()
	scalar := func(v string) bool {
		t := g.Initializers[v]
		return t != nil && graph.Numel(t) == 1 && g.Info(v).Float()
	}
	// back follows v, read by one node, up through elided Casts each
	// read by one node to what makes it.
	back := func(v string) *graph.Node {
		for {
			if len(consumers[v]) != 1 {
				return nil
			}
			p := producers[v]
			if p == nil || !elided[p] {
				return p
			}
			v = p.Input(0)
		}
	}
	fused := map[*graph.Node]bool{}
	for _, n := range g.Nodes {
		if (n.Op != "Mul" && n.Op != "Div") || n.Domain != "" || len(n.Inputs) != 2 {
			continue
		}
		for k := range 2 {
			if n.Op == "Div" && k == 0 || !scalar(n.Inputs[k]) {
				continue
			}
			if p := back(n.Inputs[1-k]); p != nil && p.Op == "MatMul" && p.Domain == "" {
				fused[n] = true
			} else if r := soleReader(n.Outputs[0], consumers, elided, nil); r != nil && r.Op == "MatMul" && r.Domain == "" {
				fused[n] = true
			}
		}
	}
	return fused
}

// classOf is n's efficiency class.
func classOf(g *graph.Graph, n *graph.Node) string {
	switch n.Op {
	case "Conv", "ConvTranspose":
		// A weight gradient written as a Conv (batch and channel axes
		// swapped) has the output gradient's map as its window, which no
		// layer's kernel is as large as; cuDNN runs it far below a
		// forward convolution's rate.
		if w := g.Info(n.Input(1)); n.Op == "Conv" && w.Static() && len(w.Shape) > 2 && dtype.Numel(w.Shape[2:]) > 121 {
			if len(w.Shape) == 5 {
				return classConvWgradVolume
			}
			return classConvWgrad
		}
		if len(g.Info(n.Input(0)).Shape) == 5 {
			return classConvVolume
		}
		if n.Op == "ConvTranspose" {
			return classConvT
		}
		return classConv
	case "MatMul", "Gemm", "Einsum":
		if a := g.Info(n.Input(0)); n.Op == "MatMul" && a.Known && len(a.Shape) > 0 && a.Shape[len(a.Shape)-1] >= 1<<16 {
			return classGEMMLongK
		}
		return classGEMM
	case "Cast":
		return classCast
	case "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceLogSum":
		if cudaform.FastReduce(g, n) {
			return classReduce
		}
		return classReduceDNN
	case "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ArgMax", "ArgMin":
		return classReduceDNN
	case "BatchNormalization", "LayerNormalization", "GroupNormalization", "InstanceNormalization":
		return classNorm
	case "Transpose":
		return classTranspose
	case "Slice":
		return classSlice
	case "Concat", "Pad", "Identity", "Expand", "Gather", "GatherElements", "GatherND", "Split", "Tile", "Resize",
		"DepthToSpace", "SpaceToDepth", "Trilu", "ConstantOfShape":
		return classCopy
	case "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool":
		return classPool
	case "ScatterElements", "ScatterND":
		return classScatter
	case "Softmax", "LogSoftmax", "SoftmaxCrossEntropyLoss":
		return classSoftmax
	}
	return classElem
}

// float16Class is a product class's float16 variant: itself where the
// profiles showed no difference from bfloat16.
var float16Class = map[string]string{classConv: classConv, classConvT: classConvT, classConvWgrad: classConvWgrad,
	classConvWgradVolume: classConvWgradVolume, classConvVolume: classConvVolume16, classGEMM: classGEMM, classGEMMLongK: classGEMMLongK16}

// productClass are the classes of matrix products, whose rate depends on
// their types (productRate).
var productClass = map[string]bool{classConv: true, classConvT: true, classConvWgrad: true, classConvWgradVolume: true, classConvVolume: true,
	classGEMM: true, classGEMMLongK: true, classConvVolume16: true, classGEMMLongK16: true}

// productRate is the peak FLOP/s a matrix product runs at: tensor cores
// in float16/bfloat16, TF32 for float32 with use_tf32, else float32. A
// product the device lacks a low-precision kernel for (lacksBF16) runs
// float32 on rounded values.
func productRate(g *graph.Graph, n *graph.Node, gpu GPU, o StepOptions, lowVal map[string]bool) float64 {
	if lowVal[n.Input(0)] && !emulatedOn(n, o.low) {
		return gpu.Tensor16
	}
	switch g.Info(n.Input(0)).DType {
	case dtype.Float16, dtype.BFloat16:
		return gpu.Tensor16
	case dtype.Float32:
		if o.TF32 {
			return gpu.TF32
		}
	}
	return gpu.FP32
}

// valueBytes is v's size in g, 0 when unknown.
func valueBytes(g *graph.Graph, v string) int64 {
	info := g.Info(v)
	if v == "" || !info.Static() {
		return 0
	}
	return dtype.Numel(info.Shape) * int64(info.DType.Size())
}

// deviceBytes is v's size as the device holds it: in the low type where
// lowTyping says so.
func deviceBytes(g *graph.Graph, v string, lowVal map[string]bool, low dtype.DType) int64 {
	if lowVal[v] && low != 0 {
		return valueBytes(g, v) / int64(g.Info(v).DType.Size()) * int64(low.Size())
	}
	return valueBytes(g, v)
}

// work is n's FLOPs and the bytes it moves: every input read once and
// every output written once, in the types the device holds them in.
func work(g *graph.Graph, n *graph.Node, lowVal map[string]bool, low dtype.DType) (flops, bytes float64) {
	for _, in := range n.Inputs {
		bytes += float64(deviceBytes(g, in, lowVal, low))
	}
	var outElems float64
	for _, v := range n.Outputs {
		bytes += float64(deviceBytes(g, v, lowVal, low))
		if info := g.Info(v); info.Static() {
			outElems += float64(dtype.Numel(info.Shape))
		}
	}
	x := g.Info(n.Input(0))
	switch n.Op {
	case "Conv", "ConvTranspose":
		w := g.Info(n.Input(1))
		if !w.Static() || len(w.Shape) < 3 {
			return outElems, bytes
		}
		// 2 × per output element × input channels per group × window:
		// Conv's W is [M, C/group, k...], ConvTranspose's [C, M/group, k...]
		// and its input is the smaller map, so count per input element.
		window := float64(dtype.Numel(w.Shape[2:]))
		if n.Op == "Conv" {
			return 2 * outElems * float64(w.Shape[1]) * window, bytes
		}
		if x.Static() {
			return 2 * float64(dtype.Numel(x.Shape)) * float64(w.Shape[1]) * window, bytes
		}
	case "MatMul", "Gemm":
		// 2 × output elements × the contracted size.
		if x.Static() && len(x.Shape) > 0 {
			k := x.Shape[len(x.Shape)-1]
			if n.Op == "Gemm" && n.Int("transA", 0) == 1 && len(x.Shape) == 2 {
				k = x.Shape[0]
			}
			return 2 * outElems * float64(k), bytes
		}
	case "Einsum":
		return 2 * outElems, bytes
	}
	if x.Static() {
		return max(outElems, float64(dtype.Numel(x.Shape))), bytes
	}
	return outElems, bytes
}

// WriteText prints the prediction as plan's rows.
func (st *StepTime) WriteText(w io.Writer, top int) {
	fmt.Fprintf(w, "step time    %.1f ms per step on an %s at batch %d (predicted: %d kernels, %.1f ms of them, %.1f ms of it launches; host %.1f ms, %d nodes on the CPU; training graph %.1f ms, optimizer %.1f ms)\n",
		st.StepMS, st.GPU.Title, st.Batch, st.Kernels, st.KernelMS, st.LaunchMS, st.HostMS, st.CPUNodes, st.TrainingMS, st.OptimizerMS)
	var parts []string
	for _, op := range st.Ops[:min(top, len(st.Ops))] {
		parts = append(parts, fmt.Sprintf("%s %.1f ms (%d)", op.Op, op.MS, op.Calls))
	}
	fmt.Fprintf(w, "  by op      %s\n", strings.Join(parts, ", "))
	if f := st.Float16; f != nil {
		c, c16 := st.convs(), f.convs()
		fmt.Fprintf(w, "  16-mixed   %.1f ms per step (%s%%): ONNX Runtime's CUDA provider has no bfloat16 Conv or ConvTranspose, so bf16-mixed runs the step's %d convolutions in float32 with TF32 (%.1f ms), 16-mixed in float16 (%.1f ms); --set trainer.precision=16-mixed, which adds dynamic loss scaling\n",
			f.StepMS, strings.Replace(fmt.Sprintf("%+.0f", 100*(f.StepMS/st.StepMS-1)), "-", "−", 1), c.calls, c.ms, c16.ms)
	}
	if l := st.Larger; l != nil {
		fmt.Fprintf(w, "  launches   %.1f of the %.1f ms: at this batch the GPU mostly waits for ONNX Runtime to launch its %d kernels; at batch %d a step is predicted at %.1f ms (%.1f of it launches), %.1f× the samples a second (data.batch_size; plan --memory says whether it fits)\n",
			st.LaunchMS, st.StepMS, st.Kernels, l.Batch, l.StepMS, l.LaunchMS, float64(l.Batch)/l.StepMS/(float64(st.Batch)/st.StepMS))
	}
	fmt.Fprintf(w, "  model      each kernel: max(FLOPs / peak, bytes / bandwidth) at its op class's efficiency (fitted on profiles of ResNet-50, the diffusion LM and the VQ-GAN preset on an H200; against steps measured there, 2026-11-26: ResNet-50 −7%%, the diffusion LM +3%% at batch 64 and +2%% at 128, the VQ-GAN at batch 1 +5%% in bf16-mixed and +9%% in 16-mixed) + %.0f µs launch; %s: %.0f TFLOP/s fp16/bf16, %.0f TF32, %.1f fp32, %.2f TB/s\n",
		LaunchSeconds*1e6, st.GPU.Title, st.GPU.Tensor16/1e12, st.GPU.TF32/1e12, st.GPU.FP32/1e12, st.GPU.Bandwidth/1e12)
}
