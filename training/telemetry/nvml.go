package telemetry

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// NVML's C ABI, declared here for the few calls used: every call returns
// an int status (0 = success); a device is an opaque pointer.
typedef int (*ortrain_nvml_void)(void);
typedef int (*ortrain_nvml_uintp)(unsigned int*);
typedef int (*ortrain_nvml_handle)(unsigned int, void**);
typedef int (*ortrain_nvml_dev_str)(void*, char*, unsigned int);
typedef int (*ortrain_nvml_dev_ull3)(void*, unsigned long long*);
typedef int (*ortrain_nvml_dev_uint2)(void*, unsigned int*);
typedef int (*ortrain_nvml_dev_uintp)(void*, unsigned int*);
typedef int (*ortrain_nvml_dev_clock)(void*, int, unsigned int*);
typedef int (*ortrain_nvml_str)(char*, unsigned int);

static void* ortrain_nvml_lib;
static void* ortrain_nvml_fn[11];
static const char* ortrain_nvml_names[11] = {
	"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2",
	"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName",
	"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
	"nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
	"nvmlDeviceGetClockInfo", "nvmlSystemGetDriverVersion",
};

// ortrain_nvml_open loads libnvidia-ml and resolves every symbol; it
// returns 0 on success, 1 when the library is missing, 2 when a symbol is.
static int ortrain_nvml_open(void) {
	if (ortrain_nvml_lib) return 0;
	void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) return 1;
	for (int i = 0; i < 11; i++) {
		ortrain_nvml_fn[i] = dlsym(h, ortrain_nvml_names[i]);
		if (!ortrain_nvml_fn[i]) { dlclose(h); return 2; }
	}
	ortrain_nvml_lib = h;
	return 0;
}

static int ortrain_nvml_init(void) { return ((ortrain_nvml_void)ortrain_nvml_fn[0])(); }
static int ortrain_nvml_count(unsigned int* n) { return ((ortrain_nvml_uintp)ortrain_nvml_fn[2])(n); }
static int ortrain_nvml_handle_of(unsigned int i, void** d) { return ((ortrain_nvml_handle)ortrain_nvml_fn[3])(i, d); }
static int ortrain_nvml_name(void* d, char* s, unsigned int n) { return ((ortrain_nvml_dev_str)ortrain_nvml_fn[4])(d, s, n); }
// memory: total, free, used in bytes
static int ortrain_nvml_memory(void* d, unsigned long long* m) { return ((ortrain_nvml_dev_ull3)ortrain_nvml_fn[5])(d, m); }
// utilization: gpu %, memory %
static int ortrain_nvml_util(void* d, unsigned int* u) { return ((ortrain_nvml_dev_uint2)ortrain_nvml_fn[6])(d, u); }
static int ortrain_nvml_power(void* d, unsigned int* mw) { return ((ortrain_nvml_dev_uintp)ortrain_nvml_fn[7])(d, mw); }
static int ortrain_nvml_power_limit(void* d, unsigned int* mw) { return ((ortrain_nvml_dev_uintp)ortrain_nvml_fn[8])(d, mw); }
// clock type 1 is the SM clock
static int ortrain_nvml_sm_clock(void* d, unsigned int* mhz) { return ((ortrain_nvml_dev_clock)ortrain_nvml_fn[9])(d, 1, mhz); }
static int ortrain_nvml_driver(char* s, unsigned int n) { return ((ortrain_nvml_str)ortrain_nvml_fn[10])(s, n); }
*/
import "C"

import (
	"fmt"
	"sync"
	"time"
	"unsafe"
)

var (
	nvmlOnce sync.Once
	nvmlErr  error
)

// nvmlReady loads and initialises NVML once per process.
func nvmlReady() error {
	nvmlOnce.Do(func() {
		switch C.ortrain_nvml_open() {
		case 1:
			nvmlErr = errNoNVML
			return
		case 2:
			nvmlErr = fmt.Errorf("libnvidia-ml.so.1 lacks a needed symbol (driver too old)")
			return
		}
		if r := C.ortrain_nvml_init(); r != 0 {
			nvmlErr = fmt.Errorf("nvmlInit_v2 failed with status %d", int(r))
		}
	})
	return nvmlErr
}

type nvmlDevice struct{ h unsafe.Pointer }

func nvmlCount() (int, error) {
	var n C.uint
	if r := C.ortrain_nvml_count(&n); r != 0 {
		return 0, fmt.Errorf("nvmlDeviceGetCount_v2: status %d", int(r))
	}
	return int(n), nil
}

func nvmlDeviceAt(i int) (nvmlDevice, error) {
	var h unsafe.Pointer
	if r := C.ortrain_nvml_handle_of(C.uint(i), &h); r != 0 {
		return nvmlDevice{}, fmt.Errorf("nvmlDeviceGetHandleByIndex_v2(%d): status %d", i, int(r))
	}
	return nvmlDevice{h}, nil
}

func (d nvmlDevice) name() string {
	buf := make([]C.char, 256)
	if C.ortrain_nvml_name(d.h, &buf[0], C.uint(len(buf))) != 0 {
		return ""
	}
	return C.GoString(&buf[0])
}

func nvmlDriver() string {
	buf := make([]C.char, 128)
	if C.ortrain_nvml_driver(&buf[0], C.uint(len(buf))) != 0 {
		return ""
	}
	return C.GoString(&buf[0])
}

// memory returns total and used bytes.
func (d nvmlDevice) memory() (total, used uint64, ok bool) {
	var m [3]C.ulonglong
	if C.ortrain_nvml_memory(d.h, &m[0]) != 0 {
		return 0, 0, false
	}
	return uint64(m[0]), uint64(m[2]), true
}

// sample reads what it can; fields a GPU does not report stay NaN.
func (d nvmlDevice) sample() (Sample, error) {
	s := emptySample(time.Now())
	total, used, ok := d.memory()
	if !ok {
		// The one reading every GPU supports; failing it means the device
		// is gone (e.g. fallen off the bus).
		return s, fmt.Errorf("nvmlDeviceGetMemoryInfo failed")
	}
	s.MemTotal, s.MemUsed = float64(total), float64(used)
	var u [2]C.uint
	if C.ortrain_nvml_util(d.h, &u[0]) == 0 {
		s.UtilPct, s.MemUtilPct = float64(u[0]), float64(u[1])
	}
	var mw C.uint
	if C.ortrain_nvml_power(d.h, &mw) == 0 {
		s.PowerW = float64(mw) / 1000
	}
	if C.ortrain_nvml_power_limit(d.h, &mw) == 0 {
		s.PowerLimitW = float64(mw) / 1000
	}
	var mhz C.uint
	if C.ortrain_nvml_sm_clock(d.h, &mhz) == 0 {
		s.SMClockMHz = float64(mhz)
	}
	return s, nil
}
