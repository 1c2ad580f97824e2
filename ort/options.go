package ort

import "github.com/ortrain/ortrain/ort/ortopt"

// The session settings are package ortopt's (pure Go, for configuration
// and planning); ort names them too for its callers.
type (
	Options     = ortopt.Options
	CPUOptions  = ortopt.CPUOptions
	CUDAOptions = ortopt.CUDAOptions
	Device      = ortopt.Device
	OptionError = ortopt.OptionError
)

// CPU is the host.
var CPU = ortopt.CPU

// CUDADevice returns the GPU with ordinal id.
func CUDADevice(id int) Device { return ortopt.CUDADevice(id) }

// ParseDevice reads "cpu", "cuda" (GPU 0) or "cuda:N".
func ParseDevice(s string) (Device, error) { return ortopt.ParseDevice(s) }
