// Package ortopt holds the settings of an ONNX Runtime session, the device
// and the CPU and CUDA providers' options, in pure Go: configuration and
// planning read and check them without ONNX Runtime's headers; package ort
// applies them.
package ortopt

import (
	"fmt"
	"strconv"
	"strings"
)

// Device is where a session runs and its values live: the host CPU or one CUDA GPU.
type Device struct {
	CUDA bool
	ID   int // the CUDA device ordinal; 0 for the CPU
}

// CPU is the host.
var CPU = Device{}

// CUDADevice returns the GPU with ordinal id.
func CUDADevice(id int) Device { return Device{CUDA: true, ID: id} }

// String writes the device as ParseDevice reads it: "cpu" or "cuda:N".
func (d Device) String() string {
	if d.CUDA {
		return "cuda:" + strconv.Itoa(d.ID)
	}
	return "cpu"
}

// ParseDevice reads "cpu", "cuda" (GPU 0) or "cuda:N".
func ParseDevice(s string) (Device, error) {
	switch {
	case s == "cpu":
		return CPU, nil
	case s == "cuda" || s == "gpu":
		return CUDADevice(0), nil
	case strings.HasPrefix(s, "cuda:"):
		id, err := strconv.Atoi(strings.TrimPrefix(s, "cuda:"))
		if err == nil && id >= 0 {
			return CUDADevice(id), nil
		}
	}
	return Device{}, &OptionError{Option: "device", Value: s, Want: `"cpu", "cuda" or "cuda:N" with N ≥ 0`}
}

// MemoryInfoName is ONNX Runtime's allocator name for the device.
func (d Device) MemoryInfoName() string {
	if d.CUDA {
		return "Cuda"
	}
	return "Cpu"
}

// OptionError is a provider or session option with a value ortrain rejects.
type OptionError struct {
	Option string
	Value  any
	Want   string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("bad value %v for %s: want %s", e.Value, e.Option, e.Want)
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *OptionError) BadInput() bool { return true }
