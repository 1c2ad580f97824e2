package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/ortrain/ortrain/ort"
	devcheck "github.com/ortrain/ortrain/training/doctor"
)

// trainingCheckFailed is doctor's exit 1: a device opens but does not
// train as the CPU does. The line above says which op.
type trainingCheckFailed struct{ dev ort.Device }

func (e trainingCheckFailed) Error() string {
	return fmt.Sprintf("%v does not train as the CPU does (see the training line above)", e.dev)
}

// doctorTraining runs doctor.Training on dev and prints its line: what ran
// and how close it came to the CPU, or the op that fails.
func doctorTraining(w io.Writer, dev ort.Device) error {
	label := dev.String() + " training"
	// Full float32 kernels (TF32 off): measured on an H200, the check's
	// tensors agree with the CPU's within 3.3e-7, a 3000-fold margin
	// under its 1e-3; with TF32 on they differ by up to 7.1e-4, which
	// leaves no margin, and TF32's rounding is not what doctor looks for.
	res, err := devcheck.Training(devcheck.Options{Device: dev})
	if err != nil {
		fmt.Fprintf(w, "%-14s FAIL: %v\n", label, err)
		return trainingCheckFailed{dev}
	}
	fmt.Fprintf(w, "%-14s ok (%d steps of a %d-node training and optimizer graph: %s; losses %s; differs from the CPU by at most %.1e, tolerance %.0e)\n",
		label, res.Steps, res.Nodes, keyOps(res.Ops), losses(res.Losses), res.MaxDiff, res.Tolerance)
	return nil
}

// keyOps lists the ops the check is there for, as the check's graphs hold them.
func keyOps(ops []string) string {
	var out []string
	for _, op := range []string{"Conv", "Slice", "ScatterElements", "GatherElements", "ReduceMean", "ReduceSum", "ArgMax", "MatMul"} {
		for _, o := range ops {
			if o == op {
				out = append(out, op)
			}
		}
	}
	return strings.Join(out, ", ") + ", SGD"
}

func losses(l []float64) string {
	var s []string
	for _, x := range l {
		s = append(s, fmt.Sprintf("%.4f", x))
	}
	return strings.Join(s, " → ")
}
