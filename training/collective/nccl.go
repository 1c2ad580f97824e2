package collective

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>

// NCCL's and the CUDA runtime's entry points, declared here from their
// documented signatures (no header needed to build): results and errors
// are ints, communicators and streams opaque pointers, the unique id 128
// bytes passed by value.
typedef struct { char bytes[128]; } ortrain_nccl_id;
typedef void *ortrain_nccl_comm;
typedef void *ortrain_cuda_stream;

static void *nccl_lib, *cudart_lib;
static int (*p_nccl_version)(int *);
static int (*p_nccl_unique_id)(ortrain_nccl_id *);
static int (*p_nccl_init_rank)(ortrain_nccl_comm *, int, ortrain_nccl_id, int);
static int (*p_nccl_all_reduce)(const void *, void *, size_t, int, int, ortrain_nccl_comm, ortrain_cuda_stream);
static int (*p_nccl_group_start)(void);
static int (*p_nccl_group_end)(void);
static int (*p_nccl_async_error)(ortrain_nccl_comm, int *);
static int (*p_nccl_destroy)(ortrain_nccl_comm);
static int (*p_nccl_abort)(ortrain_nccl_comm);
static const char *(*p_nccl_error_string)(int);
static int (*p_cuda_set_device)(int);
static int (*p_cuda_device_count)(int *);
static int (*p_cuda_stream_create)(ortrain_cuda_stream *, unsigned int);
static int (*p_cuda_stream_query)(ortrain_cuda_stream);
static int (*p_cuda_stream_destroy)(ortrain_cuda_stream);
static const char *(*p_cuda_error_string)(int);

// ortrain_nccl_open loads NCCL from path; it returns NULL or what failed.
static const char *ortrain_nccl_open(const char *path) {
	if (nccl_lib) return NULL;
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) return dlerror();
#define SYM(p, name) if (!(p = dlsym(lib, name))) { dlclose(lib); return name; }
	SYM(p_nccl_version, "ncclGetVersion")
	SYM(p_nccl_unique_id, "ncclGetUniqueId")
	SYM(p_nccl_init_rank, "ncclCommInitRank")
	SYM(p_nccl_all_reduce, "ncclAllReduce")
	SYM(p_nccl_group_start, "ncclGroupStart")
	SYM(p_nccl_group_end, "ncclGroupEnd")
	SYM(p_nccl_async_error, "ncclCommGetAsyncError")
	SYM(p_nccl_destroy, "ncclCommDestroy")
	SYM(p_nccl_abort, "ncclCommAbort")
	SYM(p_nccl_error_string, "ncclGetErrorString")
#undef SYM
	nccl_lib = lib;
	return NULL;
}

// ortrain_cudart_open finds the CUDA runtime: the one ONNX Runtime's CUDA
// provider already loaded when there is one, else path.
static const char *ortrain_cudart_open(const char *path) {
	if (cudart_lib) return NULL;
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) return dlerror();
#define SYM(p, name) if (!(p = dlsym(lib, name))) { dlclose(lib); return name; }
	SYM(p_cuda_set_device, "cudaSetDevice")
	SYM(p_cuda_device_count, "cudaGetDeviceCount")
	SYM(p_cuda_stream_create, "cudaStreamCreateWithFlags")
	SYM(p_cuda_stream_query, "cudaStreamQuery")
	SYM(p_cuda_stream_destroy, "cudaStreamDestroy")
	SYM(p_cuda_error_string, "cudaGetErrorString")
#undef SYM
	cudart_lib = lib;
	return NULL;
}

static int ortrain_nccl_version(int *v) { return p_nccl_version(v); }
static int ortrain_nccl_unique_id(ortrain_nccl_id *id) { return p_nccl_unique_id(id); }
static const char *ortrain_nccl_error(int rc) { return p_nccl_error_string(rc); }
static const char *ortrain_cuda_error(int rc) { return p_cuda_error_string(rc); }
static int ortrain_cuda_device_count(int *n) { return p_cuda_device_count(n); }

// The CUDA device is a property of the calling thread, so each call sets
// it before it touches the communicator or the stream: Go may run
// successive calls on different threads.

// ortrain_nccl_init joins the communicator on device dev with a stream of
// its own that does not wait on the legacy default stream (flag 1,
// cudaStreamNonBlocking). *cuda_rc is set when CUDA failed.
static int ortrain_nccl_init(int dev, int size, int rank, const ortrain_nccl_id *id,
		ortrain_nccl_comm *comm, ortrain_cuda_stream *stream, int *cuda_rc) {
	if ((*cuda_rc = p_cuda_set_device(dev)) != 0) return 0;
	if ((*cuda_rc = p_cuda_stream_create(stream, 1)) != 0) return 0;
	return p_nccl_init_rank(comm, size, *id, rank);
}

// ortrain_nccl_sum launches one all-reduce (sum, in place) per buffer in
// a single group, so NCCL fuses them into as few kernels as it can.
static int ortrain_nccl_sum(int dev, ortrain_nccl_comm comm, ortrain_cuda_stream stream,
		const uintptr_t *bufs, const size_t *counts, const int *types, int n, int *cuda_rc) {
	if ((*cuda_rc = p_cuda_set_device(dev)) != 0) return 0;
	int rc = p_nccl_group_start();
	if (rc) return rc;
	for (int i = 0; i < n; i++) {
		void *buf = (void *)bufs[i];
		rc = p_nccl_all_reduce(buf, buf, counts[i], types[i], 0, comm, stream);
		if (rc) break;
	}
	int end = p_nccl_group_end();
	return rc ? rc : end;
}

// ortrain_nccl_poll reports the stream's state: 0 done, 1 running, -1 a
// CUDA error (in *cuda_rc) or an NCCL one (the return value, when > 1).
static int ortrain_nccl_poll(int dev, ortrain_nccl_comm comm, ortrain_cuda_stream stream, int *cuda_rc, int *nccl_rc) {
	*nccl_rc = 0;
	if ((*cuda_rc = p_cuda_set_device(dev)) != 0) return -1;
	int q = p_cuda_stream_query(stream);
	if (q == 0) return 0;
	if (q != 600) { *cuda_rc = q; return -1; } // 600: cudaErrorNotReady
	int async = 0;
	if (p_nccl_async_error(comm, &async) != 0 || async != 0) { *nccl_rc = async ? async : 1; return -1; }
	return 1;
}

static void ortrain_nccl_close(int dev, ortrain_nccl_comm comm, ortrain_cuda_stream stream, int abort) {
	p_cuda_set_device(dev);
	if (comm) { if (abort) p_nccl_abort(comm); else p_nccl_destroy(comm); }
	if (stream) p_cuda_stream_destroy(stream);
}
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ortrain/ortrain/dtype"
)

// NCCLLibraryEnv names the NCCL library to load instead of searching.
const NCCLLibraryEnv = "ORTRAIN_NCCL_LIB"

// ncclCandidates lists where NCCL is looked for, in order: the system's
// library path (LD_LIBRARY_PATH, ldconfig), then the NVIDIA wheels a
// PyTorch installation brings (nvidia-nccl-cu12/cu13 put it under
// site-packages/nvidia/nccl/lib), in the virtualenv or conda environment
// first.
func ncclCandidates() []string {
	if p := os.Getenv(NCCLLibraryEnv); p != "" {
		return []string{p}
	}
	found := []string{"libnccl.so.2"}
	var roots []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := os.Getenv(env); p != "" {
			roots = append(roots, filepath.Join(p, "lib"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, ".local", "lib"))
	}
	roots = append(roots, "/usr/local/lib", "/usr/lib", "/opt/conda/lib")
	for _, root := range roots {
		for _, sp := range []string{"site-packages", "dist-packages"} {
			m, _ := filepath.Glob(filepath.Join(root, "python3*", sp, "nvidia", "nccl", "lib", "libnccl.so.2"))
			found = append(found, m...)
		}
	}
	return found
}

// cudartCandidates are the CUDA runtimes ONNX Runtime's CUDA provider
// links (13, then 12): the one already in the process is reused.
var cudartCandidates = []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so"}

var (
	ncclOnce    sync.Once
	ncclPath    string
	ncclVersion string
	ncclErr     error
)

// NCCLAvailable loads NCCL (once per process) and returns its path and
// version ("2.27.3"): what `ortrain doctor` reports. It needs no GPU.
func NCCLAvailable() (path, version string, err error) {
	ncclOnce.Do(func() {
		var tried []string
		for _, p := range ncclCandidates() {
			cp := C.CString(p)
			msg := C.ortrain_nccl_open(cp)
			C.free(unsafe.Pointer(cp))
			if msg == nil {
				ncclPath = p
				break
			}
			tried = append(tried, fmt.Sprintf("%s (%s)", p, C.GoString(msg)))
		}
		if ncclPath == "" {
			ncclErr = &Error{fmt.Sprintf("NCCL does not load; tried %s. Install NCCL (pip install nvidia-nccl-cu13, or NVIDIA's libnccl2 package) or set %s to libnccl.so.2", strings.Join(tried, "; "), NCCLLibraryEnv)}
			return
		}
		var v C.int
		if rc := C.ortrain_nccl_version(&v); rc != 0 {
			ncclErr = &Error{fmt.Sprintf("ncclGetVersion failed (%d) in %s", int(rc), ncclPath)}
			return
		}
		ncclVersion = formatNCCLVersion(int(v))
	})
	return ncclPath, ncclVersion, ncclErr
}

// formatNCCLVersion reads ncclGetVersion's code: major×10000 + minor×100
// + patch since NCCL 2.9, major×1000 + minor×100 + patch before.
func formatNCCLVersion(code int) string {
	if code >= 10000 {
		return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
}

// loadCUDART loads the CUDA runtime for the device communicator.
func loadCUDART() error {
	var tried []string
	for _, p := range cudartCandidates {
		cp := C.CString(p)
		msg := C.ortrain_cudart_open(cp)
		C.free(unsafe.Pointer(cp))
		if msg == nil {
			return nil
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", p, C.GoString(msg)))
	}
	return &Error{"the CUDA runtime does not load; tried " + strings.Join(tried, "; ")}
}

// GPUFor picks the GPU of the rank with local rank local (its place among
// the ranks on its machine) where count GPUs are visible: one each, in
// order. A process that sees a single GPU uses it (a launcher such as
// srun --gpus-per-task gave each rank its own); more ranks than GPUs is
// refused, as NCCL refuses two ranks on one GPU.
func GPUFor(local, count int) (int, error) {
	switch {
	case count < 1:
		return 0, &Error{"no CUDA device is visible to this rank"}
	case count == 1:
		return 0, nil
	case local < count:
		return local, nil
	}
	return 0, &Error{fmt.Sprintf("local rank %d sees only %d GPUs: data-parallel training needs one GPU per rank (NCCL does not allow two ranks on one GPU); start at most %d ranks on this machine", local, count, count)}
}

// LocalRank is this process's place among the job's ranks on its machine,
// as the launcher says (OpenMPI, SLURM, or torchrun's LOCAL_RANK).
func LocalRank() (int, bool) {
	for _, key := range []string{"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"} {
		var n int
		if _, err := fmt.Sscan(os.Getenv(key), &n); err == nil && n >= 0 {
			return n, true
		}
	}
	return 0, false
}

// CUDADeviceCount is the number of GPUs this process sees.
func CUDADeviceCount() (int, error) {
	if err := loadCUDART(); err != nil {
		return 0, err
	}
	var n C.int
	if rc := C.ortrain_cuda_device_count(&n); rc != 0 {
		return 0, &Error{"cudaGetDeviceCount: " + C.GoString(C.ortrain_cuda_error(rc))}
	}
	return int(n), nil
}

// DeviceComm sums gradients that live on this rank's GPU across the job
// with NCCL, on a stream of its own; MPI bootstraps it (the unique id).
type DeviceComm struct {
	mu     sync.Mutex
	world  *Comm
	device int
	comm   C.ortrain_nccl_comm
	stream C.ortrain_cuda_stream
	// scratch arrays for the C call, kept between steps; device
	// addresses as integers (they are not Go memory).
	bufs   []C.uintptr_t
	counts []C.size_t
	types  []C.int
}

// NewDeviceComm joins every rank of world in an NCCL communicator on
// CUDA device dev. Every rank must call it at the same point.
func NewDeviceComm(world *Comm, dev int) (*DeviceComm, error) {
	if _, _, err := NCCLAvailable(); err != nil {
		return nil, err
	}
	if err := loadCUDART(); err != nil {
		return nil, err
	}
	var id C.ortrain_nccl_id
	if world.Rank() == 0 {
		if rc := C.ortrain_nccl_unique_id(&id); rc != 0 {
			return nil, ncclError("ncclGetUniqueId", int(rc))
		}
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&id)), unsafe.Sizeof(id))
	if err := world.Broadcast(raw, 0); err != nil {
		return nil, err
	}
	d := &DeviceComm{world: world, device: dev}
	var cudaRC C.int
	rc := C.ortrain_nccl_init(C.int(dev), C.int(world.Size()), C.int(world.Rank()), &id, &d.comm, &d.stream, &cudaRC)
	if cudaRC != 0 {
		d.Close()
		return nil, &Error{fmt.Sprintf("rank %d on cuda:%d: %s", world.Rank(), dev, C.GoString(C.ortrain_cuda_error(cudaRC)))}
	}
	if rc != 0 {
		d.Close()
		return nil, ncclError(fmt.Sprintf("ncclCommInitRank (rank %d of %d on cuda:%d)", world.Rank(), world.Size(), dev), int(rc))
	}
	return d, nil
}

func ncclError(call string, rc int) error {
	return &Error{fmt.Sprintf("%s: %s (NCCL error %d; NCCL_DEBUG=INFO says more)", call, C.GoString(C.ortrain_nccl_error(C.int(rc))), rc)}
}

// DeviceBuffer is a tensor in this rank's GPU memory.
type DeviceBuffer struct {
	Ptr   uintptr
	Len   int64
	DType dtype.DType
}

// ncclType maps a tensor type to NCCL's ncclDataType_t.
func ncclType(t dtype.DType) (C.int, bool) {
	switch t {
	case dtype.Float32:
		return 7, true
	case dtype.Float16:
		return 6, true
	case dtype.BFloat16:
		return 9, true
	case dtype.Float64:
		return 8, true
	}
	return 0, false
}

// Sum sums every buffer across the ranks, in place, in one NCCL group,
// and waits until the sums are done. The buffers must not be in use by
// another stream: ONNX Runtime's run that wrote them has returned.
func (d *DeviceComm) Sum(bufs []DeviceBuffer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bufs, d.counts, d.types = d.bufs[:0], d.counts[:0], d.types[:0]
	for _, b := range bufs {
		t, ok := ncclType(b.DType)
		if !ok {
			return &Error{fmt.Sprintf("NCCL cannot sum %v tensors", b.DType)}
		}
		if b.Len == 0 {
			continue
		}
		d.bufs = append(d.bufs, C.uintptr_t(b.Ptr))
		d.counts = append(d.counts, C.size_t(b.Len))
		d.types = append(d.types, t)
	}
	if len(d.bufs) == 0 {
		return nil
	}
	d.world.watch.begin(opNCCLSum, len(d.bufs))
	defer d.world.watch.end()
	var cudaRC C.int
	rc := C.ortrain_nccl_sum(C.int(d.device), d.comm, d.stream, &d.bufs[0], &d.counts[0], &d.types[0], C.int(len(d.bufs)), &cudaRC)
	if cudaRC != 0 {
		return &Error{fmt.Sprintf("rank %d on cuda:%d: %s", d.world.Rank(), d.device, C.GoString(C.ortrain_cuda_error(cudaRC)))}
	}
	if rc != 0 {
		return ncclError(fmt.Sprintf("ncclAllReduce of %d gradients (rank %d)", len(d.bufs), d.world.Rank()), int(rc))
	}
	return d.wait()
}

// wait polls the stream rather than blocking in CUDA, so that an NCCL
// failure (a peer gone) surfaces as an error instead of a hang.
func (d *DeviceComm) wait() error {
	pause := time.Microsecond
	for {
		var cudaRC, ncclRC C.int
		switch C.ortrain_nccl_poll(C.int(d.device), d.comm, d.stream, &cudaRC, &ncclRC) {
		case 0:
			return nil
		case 1:
			time.Sleep(pause)
			pause = min(2*pause, time.Millisecond)
			continue
		}
		if cudaRC != 0 {
			return &Error{fmt.Sprintf("rank %d on cuda:%d: %s", d.world.Rank(), d.device, C.GoString(C.ortrain_cuda_error(cudaRC)))}
		}
		return ncclError(fmt.Sprintf("the gradient all-reduce (rank %d)", d.world.Rank()), int(ncclRC))
	}
}

// Close leaves the communicator.
func (d *DeviceComm) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	C.ortrain_nccl_close(C.int(d.device), d.comm, d.stream, 0)
	d.comm, d.stream = nil, nil
}
