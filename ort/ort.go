// Package ort is ortrain's layer over ONNX Runtime: finding and loading the
// shared library, execution providers and their options, sessions, host and
// device-resident tensor values, IO binding, and which provider runs each node.
//
// The library is opened, and its one environment created, by a small cgo
// layer of ortrain's own (capi.c), which also runs sessions, values and IO
// binding: onnxruntime_go, whose C headers the build uses, copies every
// output into Go memory and exposes no device memory.
package ort

/*
#cgo CFLAGS: -I${SRCDIR}/include -O2
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "capi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

var (
	initMu  sync.Mutex
	env     *C.OrtEnv
	libPath string
)

// Init loads the ONNX Runtime library at path and creates the process's
// environment. Later calls with the same path do nothing; a different path is
// an error, since one process holds one ONNX Runtime.
func Init(path string) error {
	initMu.Lock()
	defer initMu.Unlock()
	if env != nil {
		if path != libPath {
			return fmt.Errorf("ort: already initialised with %s, cannot switch to %s", libPath, path)
		}
		return nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if msg := C.ortrain_init(cpath); msg != nil {
		return &LibraryError{Path: path, Err: errors.New(C.GoString(msg))}
	}
	var e *C.OrtEnv
	if err := check(C.ortrain_create_env(C.int(3), &e)); err != nil { // 3: errors only
		return err
	}
	env, libPath = e, path
	return registerCPUArena(false)
}

// Initialised reports whether Init succeeded.
func Initialised() bool {
	initMu.Lock()
	defer initMu.Unlock()
	return env != nil
}

// LibraryPath returns the path Init loaded.
func LibraryPath() string {
	initMu.Lock()
	defer initMu.Unlock()
	return libPath
}

// Version returns the loaded ONNX Runtime's version, e.g. "1.30.0".
func Version() string { return C.GoString(C.ortrain_version()) }

// AvailableProviders lists the execution providers the loaded library was
// built with, e.g. CUDAExecutionProvider, CPUExecutionProvider.
func AvailableProviders() ([]string, error) {
	var names **C.char
	var n C.int
	if err := check(C.ortrain_available_providers(&names, &n)); err != nil {
		return nil, err
	}
	defer C.ortrain_release_providers(names, n)
	out := make([]string, int(n))
	for i, p := range unsafe.Slice(names, int(n)) {
		out[i] = C.GoString(p)
	}
	return out, nil
}

// check turns an OrtStatus into an *Error and releases it.
func check(s *C.OrtStatus) error {
	if s == nil {
		return nil
	}
	defer C.ortrain_release_status(s)
	return &Error{Code: ErrorCode(C.ortrain_error_code(s)), Msg: C.GoString(C.ortrain_error_message(s))}
}

// Error is a failure ONNX Runtime reported: its status code and message.
type Error struct {
	Code ErrorCode
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// ErrorCode is ONNX Runtime's OrtErrorCode.
type ErrorCode int

// ONNX Runtime's status codes (OrtErrorCode in its C API).
const (
	ErrFail ErrorCode = iota + 1
	ErrInvalidArgument
	ErrNoSuchFile
	ErrNoModel
	ErrEngine
	ErrRuntimeException
	ErrInvalidProtobuf
	ErrModelLoaded
	ErrNotImplemented
	ErrInvalidGraph
	ErrEPFail
	ErrModelLoadCanceled
	ErrModelRequiresCompilation
	ErrNotFound
)

var codeNames = []string{"OK", "FAIL", "INVALID_ARGUMENT", "NO_SUCHFILE", "NO_MODEL", "ENGINE_ERROR", "RUNTIME_EXCEPTION",
	"INVALID_PROTOBUF", "MODEL_LOADED", "NOT_IMPLEMENTED", "INVALID_GRAPH", "EP_FAIL", "MODEL_LOAD_CANCELED",
	"MODEL_REQUIRES_COMPILATION", "NOT_FOUND"}

func (c ErrorCode) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("ORT error %d", int(c))
}
