package ort_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/ort/orttest"
)

// tensorInfo declares a graph input or output; a string dim is symbolic.
func tensorInfo(name string, dtype ort.DType, dims ...any) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
		case string:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
		}
	}
	tt := &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(dtype))}
	if dims != nil {
		tt.Shape = shape
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: tt}}}
}

func model(t testing.TB, nodes []*onnxpb.NodeProto, in, out []*onnxpb.ValueInfoProto) []byte {
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph:       &onnxpb.GraphProto{Name: proto.String("test"), Node: nodes, Input: in, Output: out},
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func node(op string, in []string, out ...string) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Input: in, Output: out, Name: proto.String(op + "_" + out[0])}
}

// addModel is z = x + y over float32[batch, 3].
func addModel(t testing.TB) []byte {
	return model(t, []*onnxpb.NodeProto{node("Add", []string{"x", "y"}, "z")},
		[]*onnxpb.ValueInfoProto{tensorInfo("x", ort.Float32, "batch", 3), tensorInfo("y", ort.Float32, "batch", 3)},
		[]*onnxpb.ValueInfoProto{tensorInfo("z", ort.Float32, "batch", 3)})
}

func newSession(t testing.TB, m []byte) *ort.Session {
	t.Helper()
	orttest.Init(t)
	s, err := ort.NewSessionFromBytes(m, ort.Options{Device: orttest.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestSessionRunsHostValues(t *testing.T) {
	s := newSession(t, addModel(t))
	if got := s.Inputs()[0].String(); got != "x: float32[batch,3]" {
		t.Errorf("input info = %q, want x: float32[batch,3] (symbolic dim kept)", got)
	}
	if s.Outputs()[0].Symbolic[0] != "batch" || s.Outputs()[0].Shape[0] != -1 {
		t.Errorf("output dims = %v %v, want [-1 3] with symbol batch", s.Outputs()[0].Shape, s.Outputs()[0].Symbolic)
	}
	x, _ := ort.NewTensor([]int64{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	y, _ := ort.NewTensor([]int64{2, 3}, []float32{10, 20, 30, 40, 50, 60})
	defer x.Close()
	defer y.Close()
	out, err := s.Run(map[string]*ort.Value{"x": x, "y": y})
	if err != nil {
		t.Fatal(err)
	}
	defer out[0].Close()
	want := []float32{11, 22, 33, 44, 55, 66}
	got := ort.Data[float32](out[0])
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("z = %v, want %v", got, want)
		}
	}
	if sh := out[0].Shape(); len(sh) != 2 || sh[0] != 2 || sh[1] != 3 {
		t.Errorf("z shape = %v, want [2 3]", sh)
	}
}

// TestBoundOutputFeedsNextRunWithoutCopy runs z1 = x + y with z1 left on the
// session's device, then z2 = z1 + y with z1 bound as input: the value never
// passes through Go and the layer's transfer counter does not move.
func TestBoundOutputFeedsNextRunWithoutCopy(t *testing.T) {
	s := newSession(t, addModel(t))
	hx, _ := ort.NewTensor([]int64{1, 3}, []float32{1, 2, 3})
	hy, _ := ort.NewTensor([]int64{1, 3}, []float32{1, 1, 1})
	x, err := s.Upload(hx)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := s.Upload(hy)
	b, err := s.NewBinding()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	before := ort.Transfers()
	must(t, b.BindInput("x", x), b.BindInput("y", y), b.BindOutputOnDevice("z"), b.Run())
	out, err := b.Outputs()
	if err != nil {
		t.Fatal(err)
	}
	z1 := out[0]
	if z1.Location() != s.Device() {
		t.Fatalf("output lives on %v, want the session's device %v", z1.Location(), s.Device())
	}
	must(t, b.BindInput("x", z1), b.BindOutputOnDevice("z"), b.Run())
	out2, err := b.Outputs()
	if err != nil {
		t.Fatal(err)
	}
	if moved := ort.Transfers().Sub(before); moved != (ort.TransferStats{}) {
		t.Errorf("runs with bound values made host copies: %+v", moved)
	}
	if !s.Device().CUDA && z1.DataPointer() == out2[0].DataPointer() {
		t.Errorf("second run wrote over its own input")
	}
	host, err := s.Download(out2[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := ort.Data[float32](host); got[0] != 3 || got[1] != 4 || got[2] != 5 {
		t.Errorf("z2 = %v, want [3 4 5]", got)
	}
	if d := ort.Transfers().Sub(before); d.DeviceToHost != 1 || d.HostToDevice != 0 {
		t.Errorf("download counted as %+v, want one device-to-host copy", d)
	}
}

func must(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestEveryDTypeRoundTrips sends each element type through an Identity
// session and through the device and back.
func TestEveryDTypeRoundTrips(t *testing.T) {
	orttest.Init(t)
	shape := []int64{2, 3}
	cases := []struct {
		dtype ort.DType
		make  func() (*ort.Value, error)
		bytes string // the expected data, as raw bytes, for comparison
	}{
		{ort.Float32, func() (*ort.Value, error) { return ort.NewTensor(shape, []float32{1.5, -2, 0, 3e30, -1e-30, 7}) }, ""},
		{ort.Float16, func() (*ort.Value, error) {
			return ort.NewTensor(shape, []ort.Float16Bits{ort.ToFloat16(1.5), ort.ToFloat16(-2), 0, ort.ToFloat16(65504), ort.ToFloat16(6e-8), 1})
		}, ""},
		{ort.BFloat16, func() (*ort.Value, error) {
			return ort.NewTensor(shape, []ort.BFloat16Bits{ort.ToBFloat16(1.5), ort.ToBFloat16(-2), 0, ort.ToBFloat16(3e38), 1, 2})
		}, ""},
		{ort.Float64, func() (*ort.Value, error) { return ort.NewTensor(shape, []float64{math.Pi, -1, 0, 1e300, 2, 3}) }, ""},
		{ort.Int64, func() (*ort.Value, error) {
			return ort.NewTensor(shape, []int64{math.MaxInt64, math.MinInt64, 0, 1, -1, 50257})
		}, ""},
		{ort.Int32, func() (*ort.Value, error) {
			return ort.NewTensor(shape, []int32{math.MaxInt32, math.MinInt32, 0, 1, -1, 7})
		}, ""},
		{ort.Int8, func() (*ort.Value, error) { return ort.NewTensor(shape, []int8{127, -128, 0, 1, -1, 7}) }, ""},
		{ort.Uint8, func() (*ort.Value, error) { return ort.NewTensor(shape, []uint8{255, 0, 1, 2, 3, 128}) }, ""},
		{ort.Bool, func() (*ort.Value, error) { return ort.NewTensor(shape, []bool{true, false, true, true, false, false}) }, ""},
	}
	for _, c := range cases {
		t.Run(c.dtype.String(), func(t *testing.T) {
			s, err := ort.NewSessionFromBytes(model(t, []*onnxpb.NodeProto{node("Identity", []string{"x"}, "y")},
				[]*onnxpb.ValueInfoProto{tensorInfo("x", c.dtype)}, []*onnxpb.ValueInfoProto{tensorInfo("y", c.dtype)}),
				ort.Options{Device: orttest.Device(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			in, err := c.make()
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			out, err := s.Run(map[string]*ort.Value{"x": in})
			if err != nil {
				t.Fatal(err)
			}
			defer out[0].Close()
			if out[0].DType() != c.dtype || !equalBytes(in, out[0]) {
				t.Errorf("Identity returned %v %v, want the %v input unchanged", out[0].DType(), out[0].Shape(), c.dtype)
			}
			dev, err := s.Upload(in)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			back, err := s.Download(dev)
			if err != nil {
				t.Fatal(err)
			}
			defer back.Close()
			if !equalBytes(in, back) {
				t.Errorf("upload/download changed the %v data", c.dtype)
			}
		})
	}
}

func equalBytes(a, b *ort.Value) bool {
	if a.Bytes() != b.Bytes() || a.DType() != b.DType() {
		return false
	}
	x, y := ort.Data[uint8](view(a)), ort.Data[uint8](view(b))
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// view reinterprets a host value's bytes as uint8 through a copy in a new tensor.
func view(v *ort.Value) *ort.Value {
	u, err := ort.NewEmpty(ort.Uint8, []int64{v.Bytes()})
	if err != nil {
		panic(err)
	}
	raw := ort.Data[uint8](u)
	copy(raw, v.RawBytes())
	return u
}

func TestHalfConversions(t *testing.T) {
	cases := []struct {
		f    float32
		half ort.Float16Bits
		bf   ort.BFloat16Bits
	}{
		{1, 0x3c00, 0x3f80},
		{-2, 0xc000, 0xc000},
		{65504, 0x7bff, 0x477f + 1}, // bf16 rounds 65504 up to 65536
		{1e6, 0x7c00, 0x4974},       // half overflows to +Inf
		{5.960464477539063e-08, 0x0001, 0x3380},
		{float32(math.Inf(-1)), 0xfc00, 0xff80},
		{1.0009765625, 0x3c01, 0x3f80}, // 1 + 2^-10: exact in half, rounds to 1 in bf16
	}
	for _, c := range cases {
		if got := ort.ToFloat16(c.f); got != c.half {
			t.Errorf("ToFloat16(%g) = %#04x, want %#04x", c.f, got, c.half)
		}
		if got := ort.ToBFloat16(c.f); got != c.bf {
			t.Errorf("ToBFloat16(%g) = %#04x, want %#04x", c.f, got, c.bf)
		}
		if c.half != 0x7c00 && c.f == c.f {
			if back := c.half.Float32(); back != c.f && c.f != 65504 {
				t.Errorf("Float16 %#04x widens to %g, want %g", c.half, back, c.f)
			}
		}
	}
	if nan := ort.ToFloat16(float32(math.NaN())); nan.Float32() == nan.Float32() {
		t.Errorf("NaN did not survive float16")
	}
	// Every half value widens and narrows back to itself.
	for h := 0; h < 1<<16; h++ {
		f := ort.Float16Bits(h).Float32()
		if f != f {
			continue
		}
		if back := ort.ToFloat16(f); back != ort.Float16Bits(h) {
			t.Fatalf("half %#04x → %g → %#04x", h, f, back)
		}
	}
}

func TestLibraryNotFound(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	t.Setenv(ort.LibraryEnv, "")
	_, err := ort.FindLibrary(ort.LibrarySearch{Flag: missing})
	var le *ort.LibraryError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "--ort-lib = "+missing) || !strings.Contains(err.Error(), "./scripts/setup") {
		t.Fatalf("missing --ort-lib: got %v, want a LibraryError naming the flag's path and the fix", err)
	}
	t.Setenv(ort.LibraryEnv, missing)
	if _, err := ort.FindLibrary(ort.LibrarySearch{}); err == nil || !strings.Contains(err.Error(), "$ORTRAIN_ORT_LIB = "+missing) {
		t.Fatalf("missing $ORTRAIN_ORT_LIB: got %v", err)
	}
	t.Setenv(ort.LibraryEnv, "")
	empty := t.TempDir()
	path, err := ort.FindLibrary(ort.LibrarySearch{Dirs: []string{empty}})
	if err == nil {
		if !strings.HasPrefix(path, "libonnxruntime.so") {
			t.Fatalf("found %s in an empty project directory", path)
		}
		return // this machine has ONNX Runtime on its system library path
	}
	for _, place := range []string{"--ort-lib (not set)", "$ORTRAIN_ORT_LIB (not set)", "run config", filepath.Join(empty, ".cache/ort"), "system library path"} {
		if !strings.Contains(err.Error(), place) {
			t.Errorf("not-found error does not mention %q:\n%v", place, err)
		}
	}
	if !errors.As(err, &le) || !le.BadInput() {
		t.Errorf("not-found error is not a bad-input LibraryError")
	}
	// A real file in the cache is found.
	cache := filepath.Join(empty, ".cache", "ort", ort.CPUVersion)
	os.MkdirAll(cache, 0o755)
	os.WriteFile(filepath.Join(cache, "libonnxruntime.so.1"), nil, 0o644)
	if p, err := ort.FindLibrary(ort.LibrarySearch{Dirs: []string{empty}}); err != nil || p != filepath.Join(cache, "libonnxruntime.so.1") {
		t.Errorf("cache library: got %q, %v", p, err)
	}
}

func TestBadProviderOptions(t *testing.T) {
	orttest.Init(t)
	cases := []struct {
		opts ort.Options
		want string
	}{
		{ort.Options{Device: ort.CUDADevice(0), CUDA: ort.CUDAOptions{ConvAlgoSearch: "FASTEST"}}, "cudnn_conv_algo_search"},
		{ort.Options{Device: ort.CUDADevice(0), CUDA: ort.CUDAOptions{ArenaExtendStrategy: "grow"}}, "arena_extend_strategy"},
		{ort.Options{Device: ort.CUDADevice(0), CUDA: ort.CUDAOptions{GPUMemLimit: -1}}, "gpu_mem_limit"},
		{ort.Options{CPU: ort.CPUOptions{IntraOpThreads: -2}}, "intra_op_threads"},
		{ort.Options{Device: ort.Device{CUDA: true, ID: -1}}, "device"},
	}
	for _, c := range cases {
		_, err := ort.NewSessionFromBytes(addModel(t), c.opts)
		var oe *ort.OptionError
		if !errors.As(err, &oe) || oe.Option != c.want {
			t.Errorf("options %+v: got %v, want an OptionError for %s", c.opts, err, c.want)
		}
	}
	if _, err := ort.ParseDevice("gpu:1"); err == nil {
		t.Errorf("ParseDevice accepted gpu:1")
	}
	if d, err := ort.ParseDevice("cuda:3"); err != nil || d != ort.CUDADevice(3) {
		t.Errorf("ParseDevice(cuda:3) = %v, %v", d, err)
	}
}

// BenchmarkRunOverhead measures one run of a 3-element Add: almost all of it
// is the binding's and ONNX Runtime's per-run cost.
func BenchmarkRunOverhead(b *testing.B) {
	s := newSession(b, addModel(b))
	hx, _ := ort.NewTensor([]int64{1, 3}, []float32{1, 2, 3})
	x, _ := s.Upload(hx)
	b.Run("Run", func(b *testing.B) {
		for b.Loop() {
			out, err := s.Run(map[string]*ort.Value{"x": x, "y": x})
			if err != nil {
				b.Fatal(err)
			}
			out[0].Close()
		}
	})
	b.Run("Binding", func(b *testing.B) {
		bind, _ := s.NewBinding()
		defer bind.Close()
		z, _ := s.Alloc(ort.Float32, []int64{1, 3})
		bind.BindInput("x", x)
		bind.BindInput("y", x)
		bind.BindOutput("z", z)
		b.ReportAllocs()
		for b.Loop() {
			if err := bind.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestCheckDevice(t *testing.T) {
	orttest.Init(t)
	if err := ort.CheckDevice(orttest.Device(t), ort.Options{}); err != nil {
		t.Fatal(err)
	}
}

// TestErrorsKeepORTStatusCode: a failure ONNX Runtime reports keeps its
// status code (a file that is not ONNX is INVALID_PROTOBUF), not only the
// message text.
func TestErrorsKeepORTStatusCode(t *testing.T) {
	orttest.Init(t)
	path := filepath.Join(t.TempDir(), "garbage.onnx")
	if err := os.WriteFile(path, []byte("not a model at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ort.NewSession(path, ort.Options{})
	var oe *ort.Error
	if !errors.As(err, &oe) || oe.Code != ort.ErrInvalidProtobuf || oe.Code.String() != "INVALID_PROTOBUF" {
		t.Fatalf("session of a garbage file: %v (%#v); want an *ort.Error with code INVALID_PROTOBUF", err, err)
	}
}

// TestAllocatorStats runs z = x + y at two batch sizes: the session's
// allocator saw the outputs ONNX Runtime allocated, so its peak grows with
// the batch and is at least the larger output's size.
func TestAllocatorStats(t *testing.T) {
	s := newSession(t, addModel(t))
	var peaks []int64
	for _, batch := range []int64{1 << 10, 1 << 16} {
		x, _ := ort.NewEmpty(ort.Float32, []int64{batch, 3})
		y, _ := ort.NewEmpty(ort.Float32, []int64{batch, 3})
		out, err := s.Run(map[string]*ort.Value{"x": x, "y": y})
		x.Close()
		y.Close()
		if err != nil {
			t.Fatal(err)
		}
		st, ok, err := s.AllocatorStats()
		out[0].Close()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Skip("the session's allocator keeps no statistics")
		}
		t.Logf("batch %d: %+v", batch, st)
		if want := batch * 3 * 4; st.MaxInUse < want {
			t.Errorf("batch %d: MaxInUse %d < the output's %d bytes", batch, st.MaxInUse, want)
		}
		if st.TotalAllocated < st.MaxInUse {
			t.Errorf("batch %d: the arena reserved %d bytes, less than its peak in use %d", batch, st.TotalAllocated, st.MaxInUse)
		}
		peaks = append(peaks, st.MaxInUse)
	}
	if peaks[1] <= peaks[0] {
		t.Errorf("MaxInUse did not grow with the batch: %v", peaks)
	}
}

// runAdd runs the binding and returns z on the host.
func runAdd(t *testing.T, s *ort.Session, b *ort.Binding) []float32 {
	t.Helper()
	must(t, b.BindOutputOnHost("z"), b.Run())
	out, err := b.Outputs()
	if err != nil {
		t.Fatal(err)
	}
	defer out[0].Close()
	return append([]float32(nil), ort.Data[float32](out[0])...)
}

// TestBoundHostInputIsCopiedAtBind: a host value rewritten in place after
// it was bound does not reach the next run on a GPU, where the CUDA
// provider copies it when it is bound; SetBindTimeCopy makes the CPU
// provider do the same, so that code relying on in-place writes fails on
// the CPU too. On a GPU (ORTRAIN_TEST_DEVICE=cuda:0) this checks that the
// emulation is what the provider does.
func TestBoundHostInputIsCopiedAtBind(t *testing.T) {
	defer ort.SetBindTimeCopy(ort.SetBindTimeCopy(true))
	s := newSession(t, addModel(t))
	x, _ := ort.NewTensor([]int64{1, 3}, []float32{1, 2, 3})
	y, _ := ort.NewTensor([]int64{1, 3}, []float32{10, 10, 10})
	defer x.Close()
	defer y.Close()
	b, err := s.NewBinding()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	must(t, b.BindInput("x", x), b.BindInput("y", y))
	if z := runAdd(t, s, b); z[0] != 11 {
		t.Fatalf("first run z = %v, want [11 12 13]", z)
	}
	ort.Data[float32](x)[0] = 100
	if z := runAdd(t, s, b); z[0] != 11 {
		t.Errorf("after an in-place write to the bound host x, z = %v: the bind-time copy was not made", z)
	}
	must(t, b.BindInput("x", x))
	if z := runAdd(t, s, b); z[0] != 110 {
		t.Errorf("after binding x again, z = %v, want [110 12 13]", z)
	}
}

// TestStagedInputReachesEveryRun: a Staged input's host value changed
// between runs and pushed reaches each run, with emulated bind-time copies
// on the CPU and on a GPU; an unchanged small value is not copied again.
func TestStagedInputReachesEveryRun(t *testing.T) {
	defer ort.SetBindTimeCopy(ort.SetBindTimeCopy(true))
	s := newSession(t, addModel(t))
	x, err := s.NewStaged(ort.Float32, []int64{1, 3})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	y, err := s.NewStaged(ort.Float32, []int64{1, 3})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	// On a GPU the host side is the provider's pinned memory, which Go
	// writes in place as any host value.
	if err := s.PinnedErr(); err != nil || !x.Host.OnHost() {
		t.Errorf("staged host value on %v, pinned: %v; want host memory, pinned on a GPU", x.Host.Location(), err)
	}
	b, err := s.NewBinding()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	must(t, b.BindInput("x", x.Device), b.BindInput("y", y.Device))
	copy(ort.Data[float32](y.Host), []float32{10, 20, 30})
	for step := range 3 {
		copy(ort.Data[float32](x.Host), []float32{float32(step), 1, 2})
		before := ort.Transfers()
		must(t, x.Push(), y.Push())
		pushed := ort.Transfers().Sub(before).HostToDevice
		if want := map[bool]int64{true: 2, false: 1}[step == 0]; pushed != want {
			t.Errorf("step %d: %d copies to the device, want %d (y changes only before the first)", step, pushed, want)
		}
		if z := runAdd(t, s, b); z[0] != float32(step)+10 || z[2] != 32 {
			t.Errorf("step %d: z = %v, want [%d 21 32]", step, z, step+10)
		}
	}
}

// TestViewsShareOneAllocation: tensors made with View over one allocation
// are read and written in place by a run, at their offsets, and leave the
// rest of the allocation alone: what a flat parameter buffer relies on.
func TestViewsShareOneAllocation(t *testing.T) {
	s := newSession(t, addModel(t))
	in, err := s.Upload(mustTensor(t, []int64{8}, []float32{1, 2, 3, -1, 10, 20, 30, -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := s.Upload(mustTensor(t, []int64{8}, []float32{-7, -7, -7, -7, -7, -7, -7, -7}))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	view := func(v *ort.Value, at int64) *ort.Value {
		w, err := v.View(at, []int64{1, 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		if w.Location() != s.Device() {
			t.Fatalf("view lives on %v, want %v", w.Location(), s.Device())
		}
		return w
	}
	b, err := s.NewBinding()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	must(t, b.BindInput("x", view(in, 0)), b.BindInput("y", view(in, 4)), b.BindOutput("z", view(out, 5)), b.Run())
	host, err := s.Download(out)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	want := []float32{-7, -7, -7, -7, -7, 11, 22, 33}
	if got := ort.Data[float32](host); !slices.Equal(got, want) {
		t.Errorf("the flat output holds %v, want %v", got, want)
	}
	if _, err := in.View(6, []int64{3}); err == nil {
		t.Error("a view past the end of its allocation was made")
	}
}

func mustTensor(t *testing.T, shape []int64, x []float32) *ort.Value {
	v, err := ort.NewTensor(shape, x)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}
