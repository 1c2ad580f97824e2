package doctor_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/doctor"
	"github.com/ortrain/ortrain/training/graph"
)

// The check trains on the test device ($ORTRAIN_TEST_DEVICE, the CPU by
// default) as on the CPU, with the ops the brief names in its graphs.
func TestTrainingPasses(t *testing.T) {
	orttest.Init(t)
	dev := orttest.Device(t)
	start := time.Now()
	res, err := doctor.Training(doctor.Options{Device: dev})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("training check on %v: %v", dev, err)
	}
	t.Logf("%v: losses %v (CPU %v), max diff %.2g (%s), %d nodes, %v", dev, res.Losses, res.CPULosses, res.MaxDiff, res.Worst, res.Nodes, took)
	for _, op := range []string{"Conv", "Slice", "ScatterElements", "ReduceMean", "ReduceSum", "GatherElements", "ArgMax"} {
		if !slices.Contains(res.Ops, op) {
			t.Errorf("the check's graphs have no %s; ops: %v", op, res.Ops)
		}
	}
	if len(res.Losses) != 3 || len(res.CPULosses) != 3 {
		t.Errorf("losses %v, CPU %v: want 3 steps", res.Losses, res.CPULosses)
	}
	for i := range res.Losses {
		if d := math.Abs(res.Losses[i]-res.CPULosses[i]) / res.CPULosses[i]; !(d <= res.Tolerance) {
			t.Errorf("step %d: loss %g, CPU %g", i+1, res.Losses[i], res.CPULosses[i])
		}
	}
	if !dev.CUDA && took > 2*time.Second {
		t.Errorf("the check took %v on the CPU; it should take under 2 s", took)
	}
}

// An op with an attribute ONNX Runtime refuses (ScatterElements' axis out
// of range, on the device side only: a real ONNX Runtime error, not a mock)
// is named with ONNX Runtime's message, and the ops around it are not
// blamed.
func TestTrainingNamesFailingOp(t *testing.T) {
	orttest.Init(t)
	dev := orttest.Device(t)
	_, err := doctor.Training(doctor.Options{Device: dev, Perturb: func(g *graph.Graph) {
		for _, n := range g.Nodes {
			if n.Op == "ScatterElements" {
				for _, a := range n.Attrs {
					if a.GetName() == "axis" {
						a.I = proto.Int64(5)
					}
				}
			}
		}
	}})
	var oe *doctor.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("want an *OpError, got %v", err)
	}
	t.Log(err)
	if oe.Op != "ScatterElements" || oe.Err == nil || oe.Device != dev {
		t.Errorf("blamed %s (%v) on %v; want ScatterElements failing on %v", oe.Op, oe.Err, oe.Device, dev)
	}
	msg := err.Error()
	if !strings.Contains(msg, "ScatterElements (node ") || !strings.Contains(msg, "fails on "+dev.String()) || !strings.Contains(msg, "axis") {
		t.Errorf("message %q does not name the op, the device and ONNX Runtime's reason", msg)
	}
	for _, a := range oe.Also {
		if !strings.HasPrefix(a, "ScatterElements ") {
			t.Errorf("also blamed %s, which was not changed", a)
		}
	}
}

// An op that runs but computes something else on the device (here the
// momentum constant 0.9 of the optimizer and of the EMA buffer, changed on the device side only) is named
// with its difference from the CPU.
func TestTrainingNamesDifferingOp(t *testing.T) {
	orttest.Init(t)
	dev := orttest.Device(t)
	var changed []string
	_, err := doctor.Training(doctor.Options{Device: dev, Perturb: func(g *graph.Graph) {
		for _, n := range g.Nodes {
			if n.Op != "Mul" {
				continue
			}
			for i, in := range n.Inputs {
				v, ok := g.Initializers[in]
				if !ok {
					continue
				}
				if f, err := graph.FloatData(v); err == nil && len(f) == 1 && float32(f[0]) == 0.9 {
					k := g.Fresh(in + ".perturbed")
					g.AddInitializer(graph.Float32s(k, nil, []float32{0.5}))
					n.Inputs[i] = k
					changed = append(changed, n.Name)
				}
			}
		}
	}})
	if len(changed) == 0 {
		t.Fatal("found no Mul by the momentum 0.9 to change")
	}
	var oe *doctor.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("want an *OpError, got %v", err)
	}
	t.Log(err)
	if oe.Op != "Mul" || oe.Err != nil || !(oe.Diff > oe.Tolerance) || !slices.Contains(changed, oe.Node) {
		t.Errorf("blamed %s (node %s, err %v, diff %g); want a Mul among %v differing", oe.Op, oe.Node, oe.Err, oe.Diff, changed)
	}
	if !strings.Contains(err.Error(), "differs from the CPU on "+dev.String()) {
		t.Errorf("message %q does not say the op differs on %v", err, dev)
	}
}
