package trainer

import (
	"fmt"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/setup"
)

// MemoryProbe is one training step measured on a device by ONNX Runtime's
// allocator for it.
type MemoryProbe struct {
	Batch int `json:"batch"`
	// StepPeak is the most ONNX Runtime's allocator held at once in the
	// step: the intermediate values and outputs it allocates (the
	// training state and the batch are allocated apart), of the training
	// graph, or on the CPU, whose arena the optimizer graph shares, of
	// whichever holds more.
	StepPeak int64 `json:"step_peak_bytes"`
	// Reserved is what the arenas of the training, optimizer and eval
	// graphs took from the device.
	Reserved int64 `json:"reserved_bytes"`
}

// ProbeMemory loads the artifacts in dir on the device of opts and runs one
// training step (forward, backward and the optimizer's update) on a
// synthetic batch of the given size, then reads the allocators. ok is false
// where the allocators keep no statistics.
func ProbeMemory(dir string, opts ort.Options, batch int) (p MemoryProbe, ok bool, err error) {
	p.Batch = batch
	m, err := artifacts.Load(dir)
	if err != nil {
		return p, false, err
	}
	ds, err := setup.NewSynthetic(m, batch, 1)
	if err != nil {
		return p, false, err
	}
	// The synthetic set is named after the graph's inputs: no feeds needed.
	e, err := openEngine(dir, m, opts, nil)
	if err != nil {
		return p, false, err
	}
	defer e.close()
	l, err := data.New(ds, data.Config{BatchSize: batch, Workers: 1, Prefetch: 1, MaxBytes: data.PhysicalMemory()})
	if err != nil {
		return p, false, err
	}
	defer l.Close()
	b, err := l.Next()
	if err != nil {
		return p, false, err
	}
	if _, err := e.trainData.load(b, e.allTrain); err != nil {
		return p, false, err
	}
	if _, err := e.forward(true, 0); err != nil {
		return p, false, err
	}
	if _, _, err := e.update(0, 1, 1, 0); err != nil {
		return p, false, err
	}
	p.StepPeak, p.Reserved, ok, err = e.memory()
	if err != nil {
		return p, false, fmt.Errorf("probe at batch %d: %w", batch, err)
	}
	return p, ok, nil
}
