// Package ort is ortrain's layer over ONNX Runtime: finding and loading the
// shared library, execution providers and their options, sessions, host and
// device-resident tensor values, IO binding, and which provider runs each node.
//
// The library is opened and the environment created through onnxruntime_go;
// sessions, values and IO binding go through a small cgo layer of ortrain's
// own, because onnxruntime_go copies every output into Go memory and exposes
// no device memory.
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

	ortgo "github.com/yalue/onnxruntime_go"
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
	ortgo.SetSharedLibraryPath(path)
	if err := ortgo.InitializeEnvironment(ortgo.WithLogLevelError()); err != nil {
		return &LibraryError{Path: path, Err: err}
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
	return nil
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
func Version() string { return ortgo.GetVersion() }

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

// check turns an OrtStatus into an error and releases it.
func check(s *C.OrtStatus) error {
	if s == nil {
		return nil
	}
	defer C.ortrain_release_status(s)
	return errors.New(C.GoString(C.ortrain_error_message(s)))
}
