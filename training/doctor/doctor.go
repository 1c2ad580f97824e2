// Package doctor checks that a device can train: it builds a small
// training-shaped model (Model) into artifacts with the project's own
// builder, runs a few training and optimizer steps on the device the way the
// trainer does (state in device memory, every step's inputs copied there
// before the run, outputs left there) and on the CPU with plain host runs,
// and compares the losses and every updated tensor. When they disagree, or
// a run fails, it runs each op of the graphs alone on the device and on the
// CPU, fed the CPU's values, to name the op that fails.
//
// A session that opens and a tensor that makes the round trip prove little:
// a CUDA route that crashed every training graph (Slice with constant
// starts, ScatterElements with reduction add) passed that check.
package doctor

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/loss"
	"github.com/ortrain/ortrain/training/optim"
	"github.com/ortrain/ortrain/training/safetensors"
)

// Options configure the training check.
type Options struct {
	// Device is where the check trains; the CPU is the reference.
	Device ort.Device
	// Session are the device's session settings (the device is Device);
	// zero values train as an fp32 run does (TF32 off).
	Session ort.Options
	// Steps is how many training and optimizer steps run; 0 means 3.
	Steps int
	// Tolerance bounds the difference from the CPU, relative to the
	// largest magnitude of each compared tensor; 0 means 1e-3 on a GPU
	// and 1e-5 on the CPU. Measured on an H200: 3.3e-7 in float32, 7.1e-4
	// with TF32 on (Session.CUDA.UseTF32), which rounds matrix-product
	// inputs to 10 mantissa bits; a broken kernel or a stale input is off
	// by far more.
	Tolerance float64
	// Perturb, when set, rewrites every graph before the device loads it:
	// the whole training and optimizer graphs, and each one-op graph the
	// diagnosis cuts from them. Tests use it to make an op fail or differ
	// on the device for real (an attribute its kernel refuses, a changed
	// constant); the CPU reference runs the graphs as built.
	Perturb func(g *graph.Graph)
	// Trace, when set, is told what is about to run on the device
	// ("training step 1", "Slice (node Slice_3) of the training graph"),
	// so that a supervising process can name what was running if a
	// provider's crash takes this process down.
	Trace func(what string)
}

// Result is what a passing check measured.
type Result struct {
	Device    ort.Device
	Steps     int
	Losses    []float64 // the device's loss at each step
	CPULosses []float64 // the CPU's
	// MaxDiff is the largest difference from the CPU over the losses and
	// every tensor the steps update, relative to its largest magnitude;
	// Worst names that tensor.
	MaxDiff   float64
	Worst     string
	Tolerance float64
	Nodes     int      // ops in the training and optimizer graphs
	Ops       []string // their distinct op types
}

// OpError is an op that fails or differs on the device when run alone.
type OpError struct {
	Device ort.Device
	Op     string // ONNX op type
	Node   string // node name in the graph
	Graph  string // "training" or "optimizer"
	// Err is the device's error; nil when the op ran and Diff is its
	// difference from the CPU (relative, as Options.Tolerance).
	Err       error
	Output    string
	Diff      float64
	Tolerance float64
	// Also lists the other ops found failing, "Op (node)".
	Also []string
}

func (e *OpError) Error() string {
	s := fmt.Sprintf("%s (node %s, %s graph) ", e.Op, e.Node, e.Graph)
	if e.Err != nil {
		s += fmt.Sprintf("fails on %v: %s", e.Device, kernelMessage(e.Err))
	} else {
		s += fmt.Sprintf("differs from the CPU on %v by %.3g (output %s; tolerance %.0e)", e.Device, e.Diff, e.Output, e.Tolerance)
	}
	if len(e.Also) > 0 {
		s += "; also " + strings.Join(e.Also, ", ")
	}
	return s
}

// ShortError drops the source location ONNX Runtime puts before its message.
func ShortError(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "FAIL : "); i >= 0 {
		msg = msg[i+len("FAIL : "):]
	}
	return strings.TrimSpace(msg)
}

// sourceLocation is what ONNX Runtime's kernel errors start with: the
// file, line and function that raised them.
var sourceLocation = regexp.MustCompile(`^/\S+:\d+ (\S[^()]*::[^()]*\([^()]*\) )?`)

// kernelMessage is ONNX Runtime's message for an op already named: without
// the "while running X node" preamble and the source location.
func kernelMessage(err error) string {
	msg := ShortError(err)
	if i := strings.Index(msg, "Status Message: "); i >= 0 {
		msg = msg[i+len("Status Message: "):]
	}
	if loc := sourceLocation.FindString(msg); loc != "" && loc != msg {
		msg = msg[len(loc):]
	}
	return msg
}

// Training runs the check. On a disagreement or a failed run the error is
// an *OpError naming the op when one fails alone, else what differed.
func Training(opts Options) (*Result, error) {
	if opts.Steps <= 0 {
		opts.Steps = 3
	}
	if opts.Tolerance <= 0 {
		opts.Tolerance = 1e-5
		if opts.Device.CUDA {
			opts.Tolerance = 1e-3
		}
	}
	if opts.Trace == nil {
		opts.Trace = func(string) {}
	}
	c, err := build()
	if err != nil {
		return nil, err
	}
	res := &Result{Device: opts.Device, Steps: opts.Steps, Tolerance: opts.Tolerance, Nodes: len(c.train.Nodes) + len(c.opt.Nodes)}
	for _, n := range slices.Concat(c.train.Nodes, c.opt.Nodes) {
		if !slices.Contains(res.Ops, n.Op) {
			res.Ops = append(res.Ops, n.Op)
		}
	}
	slices.Sort(res.Ops)

	ref, err := c.reference(opts.Steps)
	if err != nil {
		return nil, fmt.Errorf("the CPU reference run: %w", err)
	}
	res.CPULosses = ref.losses
	if ref.losses[0] == ref.losses[len(ref.losses)-1] {
		return nil, fmt.Errorf("the CPU reference's loss did not change over %d steps (%g): the check's own model is broken", opts.Steps, ref.losses[0])
	}
	step, devErr := c.onDevice(opts, ref, res)
	if devErr == nil {
		return res, nil
	}
	if oe := c.diagnose(opts, ref, step); oe != nil {
		return res, oe
	}
	return res, fmt.Errorf("%w; every op alone agrees with the CPU within %.0e, so it is their combination on %v (a whole-graph rewrite, memory reuse, or state between runs)", devErr, opts.Tolerance, opts.Device)
}

// tensor is a host copy of a value: the check's state lives in Go memory
// between the reference runs, so no ONNX Runtime value outlives a run.
type tensor struct {
	dt    dtype.DType
	shape []int64
	raw   []byte
}

func fromValue(v *ort.Value) tensor {
	return tensor{v.DType(), slices.Clone(v.Shape()), slices.Clone(v.RawBytes())}
}

func (t tensor) value() (*ort.Value, error) { return ort.NewTensorFromBytes(t.dt, t.shape, t.raw) }

func float32s(shape []int64, v []float32) tensor {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		b := math.Float32bits(x)
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
	}
	return tensor{dtype.Float32, shape, raw}
}

func (t tensor) floats() []float64 {
	n := int(dtype.Numel(t.shape))
	out := make([]float64, n)
	for i := range out {
		switch t.dt {
		case dtype.Float32:
			b := t.raw[4*i:]
			out[i] = float64(math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24))
		case dtype.Int64:
			b := t.raw[8*i:]
			var u uint64
			for k := 7; k >= 0; k-- {
				u = u<<8 | uint64(b[k])
			}
			out[i] = float64(int64(u))
		default: // bool, 8-bit: compared exactly, byte by byte
			out[i] = float64(t.raw[i*t.dt.Size()])
		}
	}
	return out
}

// diff is the largest difference between got and want relative to want's
// largest magnitude (absolute below 1e-6); +Inf when their types, shapes or
// NaNs differ.
func diff(got, want tensor) float64 {
	if got.dt != want.dt || !slices.Equal(got.shape, want.shape) {
		return math.Inf(1)
	}
	if got.dt != dtype.Float32 && got.dt != dtype.Int64 && got.dt.Size() != 1 {
		if slices.Equal(got.raw, want.raw) {
			return 0
		}
		return math.Inf(1)
	}
	g, w := got.floats(), want.floats()
	scale, worst := 1e-6, 0.0
	for i := range w {
		if math.IsNaN(g[i]) != math.IsNaN(w[i]) || math.IsInf(g[i], 0) != math.IsInf(w[i], 0) {
			return math.Inf(1)
		}
		if math.IsNaN(w[i]) || math.IsInf(w[i], 0) {
			continue
		}
		scale = max(scale, math.Abs(w[i]))
		worst = max(worst, math.Abs(g[i]-w[i]))
	}
	return worst / scale
}

// check holds the built artifacts: the manifest, the graphs as built (the
// CPU's) and the initial state.
type check struct {
	m          *artifacts.Manifest
	train, opt *graph.Graph
	init       map[string]tensor
	batches    []map[string]tensor
	scalars    []map[string]tensor
}

// build writes the model's artifacts to a temporary directory, which it
// removes, and keeps them in memory.
func build() (*check, error) {
	dir, err := os.MkdirTemp("", "ortrain-doctor-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// SGD rather than AdamW: its update is linear in the gradient, so a
	// device's rounding stays as small in the weights as in the
	// gradients; AdamW's first step is lr·sign(g), which turns a
	// gradient of 1e-9 versus 0 into a whole step of difference.
	m, err := artifacts.Build(artifacts.Options{Graph: Model(), Out: dir, Loss: "mse:" + prediction,
		Optimizer: optim.Config{Kind: optim.SGD, LR: 0.1, Momentum: 0.9, WeightDecay: 0.01, Exact: true}})
	if err != nil {
		return nil, fmt.Errorf("building the check's artifacts: %w", err)
	}
	c := &check{m: m, init: map[string]tensor{}}
	if c.train, err = graph.Load(filepath.Join(dir, artifacts.TrainingFile)); err != nil {
		return nil, err
	}
	if c.opt, err = graph.Load(filepath.Join(dir, artifacts.OptimizerFile)); err != nil {
		return nil, err
	}
	ws, _, err := safetensors.Read(filepath.Join(dir, artifacts.WeightsFile))
	if err != nil {
		return nil, err
	}
	shapes := map[string][]int64{}
	for _, w := range ws {
		c.init[w.Name] = tensor{w.DType, w.Shape, w.Data}
		shapes[w.Name] = w.Shape
	}
	zeros := func(name string, shape []int64) {
		c.init[name] = float32s(shape, make([]float32, dtype.Numel(shape)))
	}
	for _, gr := range m.Gradients {
		zeros(gr.Name(), shapes[gr.Param])
	}
	for _, s := range m.Optimizer.States {
		zeros(s.Name, shapes[s.Param])
	}
	return c, nil
}

// batch returns step k's data and scalars: new values every step, so a
// device that kept a first step's copy of an input is caught.
func (c *check) batch(k int) (map[string]tensor, map[string]tensor) {
	for len(c.batches) <= k {
		r := rand.New(rand.NewPCG(seed, uint64(100+len(c.batches))))
		data := map[string]tensor{}
		for _, d := range c.m.Data {
			data[d.Name] = float32s(d.Shape, randn(r, int(dtype.Numel(d.Shape)), 1))
		}
		data[artifacts.Reset] = tensor{dtype.Bool, []int64{}, []byte{1}}
		step := len(c.batches) + 1
		sc := map[string]tensor{
			optim.LR:        float32s([]int64{}, []float32{0.1 / float32(step)}),
			optim.Step:      float32s([]int64{}, []float32{float32(step)}),
			optim.GradScale: float32s([]int64{}, []float32{1}),
			optim.ClipNorm:  float32s([]int64{}, []float32{10}),
		}
		c.batches, c.scalars = append(c.batches, data), append(c.scalars, sc)
	}
	return c.batches[k], c.scalars[k]
}

// run is the CPU reference's record: the losses, the state after each
// step and what each graph was fed (for the diagnosis).
type run struct {
	losses []float64
	after  []map[string]tensor // state and step outputs after each step
	// What each graph was fed at each step.
	trainFeeds, optFeeds []map[string]tensor
}

// reference runs the steps on the CPU with host values and plain runs.
func (c *check) reference(steps int) (*run, error) {
	train, err := session(c.train, ort.Options{}, nil)
	if err != nil {
		return nil, err
	}
	defer train.Close()
	opt, err := session(c.opt, ort.Options{}, nil)
	if err != nil {
		return nil, err
	}
	defer opt.Close()
	state := maps.Clone(c.init)
	r := &run{}
	for k := range steps {
		data, sc := c.batch(k)
		feed, err := inputs(train, data, state)
		if err != nil {
			return nil, err
		}
		outs, err := hostRun(train, feed)
		if err != nil {
			return nil, err
		}
		r.trainFeeds = append(r.trainFeeds, feed)
		after := absorb(state, outs)
		r.losses = append(r.losses, after[loss.Name].floats()[0])
		c.pack(state)
		if feed, err = inputs(opt, sc, state); err != nil {
			return nil, err
		}
		r.optFeeds = append(r.optFeeds, feed)
		if outs, err = hostRun(opt, feed); err != nil {
			return nil, err
		}
		for n, t := range absorb(state, outs) {
			after[n] = t
		}
		c.unpack(state)
		for n, t := range state {
			after[n] = t
		}
		r.after = append(r.after, after)
	}
	return r, nil
}

// onDevice runs the steps on opts.Device the trainer's way and compares
// each step with the reference. On a failure it also returns the step that
// failed (0-based; the last when the graphs do not load): the diagnosis
// feeds each op that step's values, as a difference may need state that
// only later steps make (momentum is zero at the first).
func (c *check) onDevice(opts Options, ref *run, res *Result) (int, error) {
	last := opts.Steps - 1
	so := opts.Session
	so.Device = opts.Device
	so.DisableMemPattern = true
	trainOpts := so
	trainOpts.DisabledOptimizers = append(slices.Clone(so.DisabledOptimizers), "CommonSubexpressionElimination")
	opts.Trace("loading the training graph")
	train, err := session(c.train, trainOpts, opts.Perturb)
	if err != nil {
		return last, fmt.Errorf("loading the training graph on %v: %s", opts.Device, ShortError(err))
	}
	defer train.Close()
	opts.Trace("loading the optimizer graph")
	opt, err := session(c.opt, so, opts.Perturb)
	if err != nil {
		return last, fmt.Errorf("loading the optimizer graph on %v: %s", opts.Device, ShortError(err))
	}
	defer opt.Close()
	// The state lives on the device from here on.
	state := map[string]*ort.Value{}
	defer func() {
		for _, v := range state {
			v.Close()
		}
	}()
	for n, t := range c.init {
		if state[n], err = upload(train, t); err != nil {
			return last, fmt.Errorf("copying %s to %v: %s", n, opts.Device, ShortError(err))
		}
	}
	for k := range opts.Steps {
		data, sc := c.batch(k)
		opts.Trace(fmt.Sprintf("training step %d", k+1))
		outs, err := deviceRun(train, data, state)
		if err != nil {
			return k, fmt.Errorf("training step %d on %v: %s", k+1, opts.Device, ShortError(err))
		}
		opts.Trace(fmt.Sprintf("optimizer step %d", k+1))
		err = c.onFlat(train, state, func() error {
			more, err := deviceRun(opt, sc, state)
			for n, v := range more {
				outs[n] = v
			}
			return err
		})
		if err != nil {
			closeAll(outs)
			return k, fmt.Errorf("optimizer step %d on %v: %s", k+1, opts.Device, ShortError(err))
		}
		got := map[string]tensor{}
		for n, v := range outs {
			t, err := download(train, v)
			if err != nil {
				closeAll(outs)
				return k, fmt.Errorf("copying %s from %v: %s", n, opts.Device, ShortError(err))
			}
			got[n] = t
		}
		for n, v := range state {
			if _, done := got[n]; !done {
				t, err := download(train, v)
				if err != nil {
					closeAll(outs)
					return k, fmt.Errorf("copying %s from %v: %s", n, opts.Device, ShortError(err))
				}
				got[n] = t
			}
		}
		closeAll(outs)
		res.Losses = append(res.Losses, got[loss.Name].floats()[0])
		want := ref.after[k]
		for _, n := range slices.Sorted(maps.Keys(want)) {
			d := diff(got[n], want[n])
			if d > res.MaxDiff || math.IsNaN(d) {
				res.MaxDiff, res.Worst = d, n
			}
			if !(d <= opts.Tolerance) {
				return k, fmt.Errorf("after step %d, %s on %v differs from the CPU by %.3g (tolerance %.0e)", k+1, n, opts.Device, d, opts.Tolerance)
			}
		}
	}
	return 0, nil
}

// deviceRun feeds data (host values, copied to the device now, as a new
// value each run: ONNX Runtime copies a bound host input when it is bound,
// not at each run) and the device-resident state to s, leaves every output
// on the device, and makes each X.out the new state X. It returns the other
// outputs by name, which the caller closes.
func deviceRun(s *ort.Session, data map[string]tensor, state map[string]*ort.Value) (map[string]*ort.Value, error) {
	b, err := s.NewBinding()
	if err != nil {
		return nil, err
	}
	defer b.Close()
	fresh := map[string]*ort.Value{}
	defer closeAll(fresh)
	for _, in := range s.Inputs() {
		v, ok := state[in.Name]
		if t, isData := data[in.Name]; isData {
			if v, err = upload(s, t); err != nil {
				return nil, err
			}
			fresh[in.Name] = v
		} else if !ok {
			return nil, fmt.Errorf("nothing to feed input %s", in.Name)
		}
		if err := b.BindInput(in.Name, v); err != nil {
			return nil, err
		}
	}
	for _, o := range s.Outputs() {
		if err := b.BindOutputOnDevice(o.Name); err != nil {
			return nil, err
		}
	}
	if err := b.Run(); err != nil {
		return nil, err
	}
	outs, err := b.Outputs()
	if err != nil {
		return nil, err
	}
	rest := map[string]*ort.Value{}
	for i, o := range s.Outputs() {
		if base, ok := strings.CutSuffix(o.Name, ".out"); ok && state[base] != nil {
			state[base].Close()
			state[base] = outs[i]
			continue
		}
		rest[o.Name] = outs[i]
	}
	return rest, nil
}

func upload(s *ort.Session, t tensor) (*ort.Value, error) {
	h, err := t.value()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return s.Upload(h)
}

func download(s *ort.Session, v *ort.Value) (tensor, error) {
	if v.OnHost() {
		return fromValue(v), nil
	}
	h, err := s.Download(v)
	if err != nil {
		return tensor{}, err
	}
	defer h.Close()
	return fromValue(h), nil
}

// session opens g on the device of opts, rewritten by perturb when given.
func session(g *graph.Graph, opts ort.Options, perturb func(*graph.Graph)) (*ort.Session, error) {
	if perturb != nil {
		g = g.Clone()
		for n, t := range g.Initializers { // Clone shares them; perturb may edit one
			g.Initializers[n] = proto.Clone(t).(*onnxpb.TensorProto)
		}
		perturb(g)
	}
	raw, err := g.Marshal()
	if err != nil {
		return nil, err
	}
	return ort.NewSessionFromBytes(raw, opts)
}

// inputs picks s's inputs from data, then state.
func inputs(s *ort.Session, data, state map[string]tensor) (map[string]tensor, error) {
	feed := map[string]tensor{}
	for _, in := range s.Inputs() {
		t, ok := data[in.Name]
		if !ok {
			t, ok = state[in.Name]
		}
		if !ok {
			return nil, fmt.Errorf("nothing to feed input %s", in.Name)
		}
		feed[in.Name] = t
	}
	return feed, nil
}

// hostRun runs s on host copies of feed and returns every output.
func hostRun(s *ort.Session, feed map[string]tensor) (map[string]tensor, error) {
	in := map[string]*ort.Value{}
	defer func() {
		for _, v := range in {
			v.Close()
		}
	}()
	for n, t := range feed {
		v, err := t.value()
		if err != nil {
			return nil, err
		}
		in[n] = v
	}
	outs, err := s.Run(in)
	if err != nil {
		return nil, err
	}
	res := map[string]tensor{}
	for i, o := range s.Outputs() {
		res[o.Name] = fromValue(outs[i])
		outs[i].Close()
	}
	return res, nil
}

// pack adds the optimizer's flat tensors (optim.Group) to a host state
// that holds every tensor by its own name, for the optimizer graph to read.
func (c *check) pack(state map[string]tensor) {
	flat := optim.Pack(c.m.Optimizer.Groups, func(n string) []byte { return state[n].raw })
	for _, g := range c.m.Optimizer.Groups {
		for _, f := range g.Flat {
			state[f.Name] = tensor{g.DType, []int64{g.Size}, flat[f.Name]}
		}
	}
}

// unpack is pack's inverse: the flat tensors' parts replace the tensors
// they hold, and the flat tensors leave the state.
func (c *check) unpack(state map[string]tensor) {
	flat := map[string][]byte{}
	for _, n := range c.flatNames() {
		flat[n] = state[n].raw
		delete(state, n)
	}
	optim.Unpack(c.m.Optimizer.Groups, flat, func(n string, b []byte) {
		state[n] = tensor{state[n].dt, state[n].shape, slices.Clone(b)}
	})
}

// flatNames are the optimizer's flat tensors' names.
func (c *check) flatNames() []string {
	var names []string
	for _, g := range c.m.Optimizer.Groups {
		for _, f := range g.Flat {
			names = append(names, f.Name)
		}
	}
	return names
}

// onFlat runs the optimizer step run with a device state packed into the
// optimizer's flat tensors and unpacked after it, through the host (the
// check's model is small; the trainer keeps views of one allocation).
func (c *check) onFlat(s *ort.Session, state map[string]*ort.Value, run func() error) error {
	if len(c.m.Optimizer.Groups) == 0 {
		return run()
	}
	host := map[string]tensor{}
	for n, v := range state {
		t, err := download(s, v)
		if err != nil {
			return err
		}
		host[n] = t
	}
	c.pack(host)
	for _, n := range c.flatNames() {
		v, err := upload(s, host[n])
		if err != nil {
			return err
		}
		state[n] = v
	}
	if err := run(); err != nil {
		return err
	}
	for _, n := range c.flatNames() {
		t, err := download(s, state[n])
		if err != nil {
			return err
		}
		host[n] = t
		state[n].Close()
		delete(state, n)
	}
	c.unpack(host)
	for n := range state {
		v, err := upload(s, host[n])
		if err != nil {
			return err
		}
		state[n].Close()
		state[n] = v
	}
	return nil
}

// absorb makes each X.out among outs the new state X and returns the
// other outputs.
func absorb(state, outs map[string]tensor) map[string]tensor {
	rest := map[string]tensor{}
	for n, t := range outs {
		if base, ok := strings.CutSuffix(n, ".out"); ok {
			if _, known := state[base]; known {
				state[base] = t
				continue
			}
		}
		rest[n] = t
	}
	return rest
}

func closeAll(vs map[string]*ort.Value) {
	for _, v := range vs {
		v.Close()
	}
}
