package ort

/*
#include <stdlib.h>
#include "capi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort/onnxpb"
)

// Session is a loaded ONNX model on one device.
type Session struct {
	p       *C.OrtSession
	opts    Options
	inputs  []IOInfo
	outputs []IOInfo
	nodes   []NodeAssignment
	alloc   *C.OrtAllocator // allocates on the session's device
	// pinned allocates page-locked host memory (the CUDA provider's), for
	// host values copied to the device every step; pinnedErr says why
	// there is none.
	pinned    *C.OrtAllocator
	pinnedMem *C.OrtMemoryInfo
	pinnedErr error
	devMem    *C.OrtMemoryInfo // the session's device, for BindOutputOnDevice
	hostMem   *C.OrtMemoryInfo
	copier    *copier // CUDA only: moves values between host and device
}

// IOInfo describes one input or output of a session.
type IOInfo struct {
	Name string
	// Tensor is false for sequences and maps, which ortrain does not bind.
	Tensor bool
	DType  DType
	// Shape has -1 for a dimension that is not fixed; Symbolic holds its name
	// ("batch", "seq") where the model gives one, "" otherwise.
	Shape    []int64
	Symbolic []string
}

// String writes the info as "name: float32[batch,3,224,224]".
func (i IOInfo) String() string {
	if !i.Tensor {
		return i.Name + ": (not a tensor)"
	}
	dims := make([]string, len(i.Shape))
	for k, d := range i.Shape {
		switch {
		case d >= 0:
			dims[k] = fmt.Sprint(d)
		case i.Symbolic[k] != "":
			dims[k] = i.Symbolic[k]
		default:
			dims[k] = "?"
		}
	}
	return fmt.Sprintf("%s: %s[%s]", i.Name, i.DType, strings.Join(dims, ","))
}

// NodeAssignment says which execution provider runs a node.
type NodeAssignment struct {
	Provider, Domain, Op, Name string
}

// CPUFallbackError is a CUDA session that would run some nodes on the CPU.
type CPUFallbackError struct {
	Nodes []NodeAssignment // the nodes without a CUDA kernel
}

// fallbackNodes are the nodes of the assignment that run on another
// provider than CUDA's, less the shape arithmetic the CUDA provider places
// on the CPU on purpose: Shape and Size, and nodes whose inputs all derive
// from them and from constants.
func fallbackNodes(model []byte, nodes []NodeAssignment) ([]NodeAssignment, error) {
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(model, &m); err != nil {
		return nil, fmt.Errorf("reading the model: %w", err)
	}
	g := m.GetGraph()
	fromShapes := map[string]bool{"": true} // an omitted optional input
	for _, t := range g.GetInitializer() {
		fromShapes[t.GetName()] = true
	}
	byName := map[string]*onnxpb.NodeProto{}
	for _, n := range g.GetNode() { // in topological order, as ONNX requires
		byName[n.GetName()] = n
		derived := n.GetOpType() == "Shape" || n.GetOpType() == "Size" || n.GetOpType() == "Constant"
		if !derived && len(n.GetInput()) > 0 {
			derived = true
			for _, in := range n.GetInput() {
				derived = derived && fromShapes[in]
			}
		}
		for _, out := range n.GetOutput() {
			fromShapes[out] = derived
		}
	}
	var cpu []NodeAssignment
	for _, a := range nodes {
		if a.Provider == "CUDAExecutionProvider" {
			continue
		}
		if n := byName[a.Name]; n != nil && len(n.GetOutput()) > 0 && fromShapes[n.GetOutput()[0]] {
			continue
		}
		cpu = append(cpu, a)
	}
	return cpu, nil
}

func (e *CPUFallbackError) Error() string {
	ops := map[string]int{}
	for _, n := range e.Nodes {
		ops[opName(n.Domain, n.Op)]++
	}
	var list []string
	for op, c := range ops {
		list = append(list, fmt.Sprintf("%s ×%d", op, c))
	}
	sort.Strings(list)
	names := make([]string, 0, 5)
	for i, n := range e.Nodes {
		if i == 5 {
			names = append(names, "...")
			break
		}
		names = append(names, n.Name)
	}
	return fmt.Sprintf("%d nodes have no CUDA kernel and would fall back to the CPU: %s (nodes %s); "+
		"allow it with allow_cpu_fallback = true, or change the model", len(e.Nodes), strings.Join(list, ", "), strings.Join(names, ", "))
}

func opName(domain, op string) string {
	if domain == "" || domain == "ai.onnx" {
		return op
	}
	return domain + ":" + op
}

// NewSession loads the model at path.
func NewSession(path string, opts Options) (*Session, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := NewSessionFromBytes(b, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// NewSessionFromBytes loads a serialised ModelProto.
func NewSessionFromBytes(model []byte, opts Options) (*Session, error) {
	if !Initialised() {
		return nil, errors.New("ort: Init has not been called")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(model) == 0 {
		return nil, errors.New("empty model")
	}
	p, err := createSession(model, opts)
	if err != nil {
		return nil, err
	}
	s := &Session{p: p, opts: opts}
	if err := s.describe(); err != nil {
		s.Close()
		return nil, err
	}
	// ONNX Runtime's own no-fallback setting is not used: the CUDA
	// provider itself puts shape arithmetic (nodes computing from Shape
	// outputs and constants only) on the CPU, where its inputs live, and
	// the setting would refuse those too. Any other node on the CPU lacks
	// a CUDA kernel.
	if opts.Device.CUDA && !opts.CUDA.AllowCPUFallback {
		cpu, err := fallbackNodes(model, s.nodes)
		if err == nil && len(cpu) > 0 {
			err = &CPUFallbackError{Nodes: cpu}
		}
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func createSession(model []byte, opts Options) (*C.OrtSession, error) {
	var so *C.OrtSessionOptions
	if err := check(C.ortrain_create_session_options(&so)); err != nil {
		return nil, err
	}
	defer C.ortrain_release_session_options(so)
	if err := check(C.ortrain_set_threads(so, C.int(opts.CPU.IntraOpThreads), C.int(opts.CPU.InterOpThreads))); err != nil {
		return nil, err
	}
	if opts.CPU.DisableArena {
		if err := check(C.ortrain_disable_cpu_arena(so)); err != nil {
			return nil, err
		}
	}
	if opts.Quiet {
		if err := check(C.ortrain_session_log_fatal_only(so)); err != nil {
			return nil, err
		}
	}
	if opts.DisableMemPattern {
		if err := check(C.ortrain_disable_mem_pattern(so)); err != nil {
			return nil, err
		}
	}
	if opts.DisableOptimizations {
		if err := check(C.ortrain_set_graph_optimization(so, 0)); err != nil {
			return nil, err
		}
	}
	if opts.ProfilePrefix != "" {
		cp := C.CString(opts.ProfilePrefix)
		err := check(C.ortrain_enable_profiling(so, cp))
		C.free(unsafe.Pointer(cp))
		if err != nil {
			return nil, err
		}
	}
	config := map[string]string{"session.record_ep_graph_assignment_info": "1"}
	if !opts.Device.CUDA && !opts.CPU.DisableArena {
		config["session.use_env_allocators"] = "1"
	}
	if len(opts.DisabledOptimizers) > 0 {
		config["optimization.disable_specified_optimizers"] = strings.Join(opts.DisabledOptimizers, ";") // ONNX Runtime splits the list at semicolons
	}
	for k, v := range config {
		ck, cv := C.CString(k), C.CString(v)
		err := check(C.ortrain_add_config(so, ck, cv))
		C.free(unsafe.Pointer(ck))
		C.free(unsafe.Pointer(cv))
		if err != nil {
			return nil, err
		}
	}
	if opts.Device.CUDA {
		// The legacy append: the core must be built with CUDA and loads
		// the provider library from beside itself. (ONNX Runtime's plugin
		// route for a CPU-only core crashed in training graphs on a GPU;
		// ortrain does not take it.)
		keys, values := opts.CUDAProviderOptions()
		ck, cv := cStrings(keys), cStrings(values)
		err := check(C.ortrain_append_cuda(so, &ck[0], &cv[0], C.size_t(len(keys))))
		freeCStrings(ck)
		freeCStrings(cv)
		if err != nil {
			return nil, fmt.Errorf("CUDA execution provider: %w", err)
		}
	}
	var p *C.OrtSession
	err := check(C.ortrain_create_session(env, unsafe.Pointer(&model[0]), C.size_t(len(model)), so, &p))
	return p, err
}

func (s *Session) describe() error {
	for out := 0; out < 2; out++ {
		var n C.size_t
		if err := check(C.ortrain_io_count(s.p, C.int(out), &n)); err != nil {
			return err
		}
		for i := 0; i < int(n); i++ {
			info, err := ioInfo(s.p, out, i)
			if err != nil {
				return err
			}
			if out == 0 {
				s.inputs = append(s.inputs, info)
			} else {
				s.outputs = append(s.outputs, info)
			}
		}
	}
	nodes, err := assignment(s.p)
	if err != nil {
		return err
	}
	s.nodes = nodes
	return nil
}

func ioInfo(p *C.OrtSession, output, i int) (IOInfo, error) {
	var name *C.char
	var onnxType, elem C.int
	var dims *C.int64_t
	var sym **C.char
	var rank C.size_t
	err := check(C.ortrain_io_info(p, C.int(output), C.size_t(i), &name, &onnxType, &elem, &dims, &sym, &rank))
	info := IOInfo{}
	if name != nil {
		info.Name = C.GoString(name)
		C.ortrain_free(unsafe.Pointer(name))
	}
	if rank > 0 {
		for k, d := range unsafe.Slice(dims, int(rank)) {
			info.Shape = append(info.Shape, int64(d))
			sp := unsafe.Slice(sym, int(rank))[k]
			info.Symbolic = append(info.Symbolic, C.GoString(sp))
			C.ortrain_free(unsafe.Pointer(sp))
		}
		C.ortrain_free(unsafe.Pointer(dims))
		C.ortrain_free(unsafe.Pointer(sym))
	}
	info.Tensor = onnxType == 1 // ONNX_TYPE_TENSOR
	info.DType = DType(elem)
	if info.Shape == nil {
		info.Shape, info.Symbolic = []int64{}, []string{}
	}
	return info, err
}

func assignment(p *C.OrtSession) ([]NodeAssignment, error) {
	var text *C.char
	err := check(C.ortrain_ep_assignment(p, &text))
	if text == nil {
		return nil, err
	}
	defer C.ortrain_free(unsafe.Pointer(text))
	var nodes []NodeAssignment
	for _, line := range strings.Split(C.GoString(text), "\n") {
		if f := strings.Split(line, "\t"); len(f) == 4 {
			nodes = append(nodes, NodeAssignment{Provider: f[0], Domain: f[1], Op: f[2], Name: f[3]})
		}
	}
	return nodes, err
}

// Inputs describes the model's inputs, in order.
func (s *Session) Inputs() []IOInfo { return s.inputs }

// Outputs describes the model's outputs, in order.
func (s *Session) Outputs() []IOInfo { return s.outputs }

// Device returns where the session runs.
func (s *Session) Device() Device { return s.opts.Device }

// Assignment lists which execution provider runs each node, as ONNX Runtime
// partitioned the graph after its basic optimisations.
func (s *Session) Assignment() []NodeAssignment { return s.nodes }

// Run feeds host or device values by input name and returns the named outputs
// (all of them when names is empty) as values ONNX Runtime allocated on the
// host. The caller owns the results. For device-resident results use a Binding.
func (s *Session) Run(inputs map[string]*Value, names ...string) ([]*Value, error) {
	if len(names) == 0 {
		for _, o := range s.outputs {
			names = append(names, o.Name)
		}
	}
	inNames := make([]string, 0, len(inputs))
	for n := range inputs {
		inNames = append(inNames, n)
	}
	sort.Strings(inNames)
	inVals := make([]*C.OrtValue, len(inNames))
	for i, n := range inNames {
		if inputs[n] == nil || inputs[n].p == nil {
			return nil, fmt.Errorf("input %q: nil or closed value", n)
		}
		inVals[i] = inputs[n].p
	}
	cin, cout := cStrings(inNames), cStrings(names)
	defer freeCStrings(cin)
	defer freeCStrings(cout)
	outVals := make([]*C.OrtValue, len(names))
	var inPtr **C.char
	var inValPtr **C.OrtValue
	if len(inNames) > 0 {
		inPtr, inValPtr = &cin[0], &inVals[0]
	}
	if len(names) == 0 {
		return nil, nil
	}
	if err := check(C.ortrain_run(s.p, inPtr, inValPtr, C.size_t(len(inNames)), &cout[0], C.size_t(len(names)), &outVals[0])); err != nil {
		return nil, err
	}
	out := make([]*Value, len(outVals))
	for i, p := range outVals {
		v, err := wrapValue(p)
		if err != nil {
			for _, o := range out[:i] {
				o.Close()
			}
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Close releases the session and what it allocated for itself.
func (s *Session) Close() {
	if s == nil || s.p == nil {
		return
	}
	if s.copier != nil {
		s.copier.close()
	}
	if s.alloc != nil {
		C.ortrain_release_allocator(s.alloc)
	}
	if s.pinned != nil {
		C.ortrain_release_allocator(s.pinned)
	}
	for _, m := range []*C.OrtMemoryInfo{s.devMem, s.hostMem, s.pinnedMem} {
		if m != nil {
			C.ortrain_release_memory_info(m)
		}
	}
	C.ortrain_release_session(s.p)
	s.p = nil
}

func cStrings(ss []string) []*C.char {
	out := make([]*C.char, len(ss))
	for i, s := range ss {
		out[i] = C.CString(s)
	}
	return out
}

func freeCStrings(cs []*C.char) {
	for _, c := range cs {
		C.free(unsafe.Pointer(c))
	}
}
