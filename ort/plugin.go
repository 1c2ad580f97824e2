package ort

/*
#include "capi.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"unsafe"
)

// CUDA through ONNX Runtime's plugin execution-provider API. A CPU-only
// core with a CUDA provider library beside it (the
// com.github.asus4.onnxruntime npm packages) lists no CUDA provider, but
// registers one from that library (RegisterExecutionProviderLibrary) and
// then offers its GPUs as EP devices (GetEpDevices), which a session takes
// with SessionOptionsAppendExecutionProvider_V2. A CUDA build lists CUDA
// itself and takes the legacy append (ortrain_append_cuda). This route has
// not yet run on a GPU: on a machine without one, registering the library
// fails naming what it lacks (the CUDA runtime, cuBLAS, cuDNN).

// CUDAPluginFile is the CUDA provider library's name beside the core.
const CUDAPluginFile = "libonnxruntime_providers_cuda.so"

// CUDAPlugin returns the CUDA provider plugin beside the loaded library
// when the library does not list CUDA among its own providers; "" when it
// does, or when there is none.
func CUDAPlugin() string {
	if providers, _ := AvailableProviders(); slices.Contains(providers, "CUDAExecutionProvider") {
		return ""
	}
	path := filepath.Join(filepath.Dir(LibraryPath()), CUDAPluginFile)
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

var (
	pluginOnce sync.Once
	pluginErr  error
)

// registerCUDAPlugin registers plugin with the environment, once per
// process (ONNX Runtime keeps a registration for the environment's life).
func registerCUDAPlugin(plugin string) error {
	pluginOnce.Do(func() {
		cn, cp := C.CString("ortrain.cuda"), C.CString(plugin)
		defer C.free(unsafe.Pointer(cn))
		defer C.free(unsafe.Pointer(cp))
		if err := check(C.ortrain_register_ep_library(env, cn, cp)); err != nil {
			pluginErr = fmt.Errorf("registering the CUDA provider plugin %s: %w", plugin, err)
		}
	})
	return pluginErr
}

// appendCUDAPlugin appends opts.Device's GPU, as the plugin offers it, to
// so with the CUDA provider options; the device is chosen by the EP device
// (its ordinal among the plugin's GPUs), not by a device_id option.
func appendCUDAPlugin(so *C.OrtSessionOptions, plugin string, opts Options) error {
	if err := registerCUDAPlugin(plugin); err != nil {
		return err
	}
	keys, values := opts.CUDAProviderOptions()
	if i := slices.Index(keys, "device_id"); i >= 0 {
		keys, values = slices.Delete(keys, i, i+1), slices.Delete(values, i, i+1)
	}
	ep := C.CString("CUDAExecutionProvider")
	defer C.free(unsafe.Pointer(ep))
	ck, cv := cStrings(keys), cStrings(values)
	defer freeCStrings(ck)
	defer freeCStrings(cv)
	var kp, vp **C.char
	if len(ck) > 0 {
		kp, vp = &ck[0], &cv[0]
	}
	found := C.int(-1)
	if err := check(C.ortrain_append_ep_gpu(env, so, ep, C.int(opts.Device.ID), kp, vp, C.size_t(len(keys)), &found)); err != nil {
		return fmt.Errorf("CUDA provider plugin %s: %w", plugin, err)
	}
	if found >= 0 {
		return fmt.Errorf("CUDA provider plugin %s offers %d GPUs; %v is not among them", plugin, int(found), opts.Device)
	}
	return nil
}
