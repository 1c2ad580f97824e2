// Package collective runs the collectives of data-parallel training on
// an established engine: MPI (Debian's OpenMPI, libmpi.so.40), loaded at
// run time as ONNX Runtime is, so that ortrain builds and runs without it
// and a run launched by mpirun (or srun) finds it. It sums host buffers
// across the ranks of the job: gradients of CPU runs, and the few scalars
// every run agrees on (losses, stop requests).
//
// OpenMPI's handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM) are the addresses
// of its predefined objects, looked up by name here; no MPI header is
// needed to build.
package collective

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef void *handle;
static void *lib;
static int (*p_init_thread)(int *, char ***, int, int *);
static int (*p_initialized)(int *);
static int (*p_comm_rank)(handle, int *);
static int (*p_comm_size)(handle, int *);
static int (*p_allreduce)(const void *, void *, int, handle, handle, handle);
static int (*p_bcast)(void *, int, handle, int, handle);
static int (*p_abort)(handle, int);
static int (*p_finalize)(void);
static handle comm_world, dt_float, dt_double, dt_byte, op_sum;

// ortrain_mpi_open loads lib and its symbols; it returns NULL or what is missing.
static const char *ortrain_mpi_open(const char *path) {
	lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL); // OpenMPI's plugins resolve libmpi's symbols globally
	if (!lib) return dlerror();
#define SYM(p, name) if (!(p = dlsym(lib, name))) return name;
	SYM(p_init_thread, "MPI_Init_thread")
	SYM(p_initialized, "MPI_Initialized")
	SYM(p_comm_rank, "MPI_Comm_rank")
	SYM(p_comm_size, "MPI_Comm_size")
	SYM(p_allreduce, "MPI_Allreduce")
	SYM(p_bcast, "MPI_Bcast")
	SYM(p_abort, "MPI_Abort")
	SYM(p_finalize, "MPI_Finalize")
	SYM(comm_world, "ompi_mpi_comm_world")
	SYM(dt_float, "ompi_mpi_float")
	SYM(dt_double, "ompi_mpi_double")
	SYM(dt_byte, "ompi_mpi_byte")
	SYM(op_sum, "ompi_mpi_op_sum")
#undef SYM
	return NULL;
}

// MPI_THREAD_SERIALIZED in OpenMPI's enumeration: calls come from any
// thread, one at a time (the Go side holds a mutex).
static int ortrain_mpi_init(int *provided) { return p_init_thread(NULL, NULL, 2, provided); }
static int ortrain_mpi_rank(int *r) { return p_comm_rank(comm_world, r); }
static int ortrain_mpi_size(int *s) { return p_comm_size(comm_world, s); }
static int ortrain_mpi_sum_float(float *buf, int n) { return p_allreduce((void *)1, buf, n, dt_float, op_sum, comm_world); }
static int ortrain_mpi_sum_double(double *buf, int n) { return p_allreduce((void *)1, buf, n, dt_double, op_sum, comm_world); }
static int ortrain_mpi_bcast(void *buf, int n, int root) { return p_bcast(buf, n, dt_byte, root, comm_world); }
static int ortrain_mpi_abort(int code) { return p_abort(comm_world, code); }
static int ortrain_mpi_finalize(void) { return p_finalize(); }
*/
import "C"

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"unsafe"
)

// Library is the MPI library a run loads; ORTRAIN_MPI_LIB overrides it.
const Library = "libmpi.so.40"

// Launched reports whether this process was started by an MPI launcher
// (mpirun, or srun with PMIx) as one rank of a job, and its world size.
func Launched() (size int, ok bool) {
	for _, key := range []string{"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"} {
		if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n >= 1 {
			return n, true
		}
	}
	return 1, false
}

// Available loads the MPI library and looks its symbols up without
// joining a job: what `ortrain doctor` reports.
func Available() (path string, err error) {
	path = os.Getenv("ORTRAIN_MPI_LIB")
	if path == "" {
		path = Library
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if msg := C.ortrain_mpi_open(cpath); msg != nil {
		return path, &Error{fmt.Sprintf("MPI library %s does not load: %s (Debian: apt-get install openmpi-bin; or set ORTRAIN_MPI_LIB)", path, C.GoString(msg))}
	}
	return path, nil
}

// Comm is this process's place in the job.
type Comm struct {
	mu         sync.Mutex
	rank, size int
	watch      watch // the collective in flight, for Watch
}

var (
	initOnce sync.Once
	world    *Comm
	initErr  error
)

// Init joins the job (once per process): MPI_Init_thread on the library.
func Init() (*Comm, error) {
	initOnce.Do(func() {
		if _, initErr = Available(); initErr != nil {
			return
		}
		var provided C.int
		if rc := C.ortrain_mpi_init(&provided); rc != 0 {
			initErr = &Error{fmt.Sprintf("MPI_Init_thread failed (%d)", int(rc))}
			return
		}
		var r, s C.int
		if C.ortrain_mpi_rank(&r) != 0 || C.ortrain_mpi_size(&s) != 0 {
			initErr = &Error{"MPI_Comm_rank/size failed"}
			return
		}
		world = &Comm{rank: int(r), size: int(s)}
	})
	return world, initErr
}

// Error is a collective that could not run.
type Error struct{ Msg string }

func (e *Error) Error() string { return "collective: " + e.Msg }

// Rank is this process's rank, 0 to Size()-1.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// SumFloat32 sums buf across the ranks, in place, in calls of at most
// 2^31-1 elements.
func (c *Comm) SumFloat32(buf []float32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watch.begin(opSumFloat32, len(buf))
	defer c.watch.end()
	for len(buf) > 0 {
		n := min(len(buf), math.MaxInt32)
		if rc := C.ortrain_mpi_sum_float((*C.float)(unsafe.Pointer(&buf[0])), C.int(n)); rc != 0 {
			return &Error{fmt.Sprintf("MPI_Allreduce of %d floats failed on rank %d (%d)", n, c.rank, int(rc))}
		}
		buf = buf[n:]
	}
	return nil
}

// SumFloat64 sums vals across the ranks, in place.
func (c *Comm) SumFloat64(vals []float64) error {
	if len(vals) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watch.begin(opSumFloat64, len(vals))
	defer c.watch.end()
	if rc := C.ortrain_mpi_sum_double((*C.double)(unsafe.Pointer(&vals[0])), C.int(len(vals))); rc != 0 {
		return &Error{fmt.Sprintf("MPI_Allreduce of %d doubles failed on rank %d (%d)", len(vals), c.rank, int(rc))}
	}
	return nil
}

// Broadcast copies root's buf to every rank's (small buffers: the bytes
// that bootstrap NCCL).
func (c *Comm) Broadcast(buf []byte, root int) error {
	if len(buf) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watch.begin(opBroadcast, len(buf))
	defer c.watch.end()
	if rc := C.ortrain_mpi_bcast(unsafe.Pointer(&buf[0]), C.int(len(buf)), C.int(root)); rc != 0 {
		return &Error{fmt.Sprintf("MPI_Bcast of %d bytes from rank %d failed on rank %d (%d)", len(buf), root, c.rank, int(rc))}
	}
	return nil
}

// Abort ends every rank of the job with code: what a rank that fails
// alone does, so that the others do not wait for it forever.
func (c *Comm) Abort(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	C.ortrain_mpi_abort(C.int(code))
}

// Finalize leaves the job; no collective may follow.
func (c *Comm) Finalize() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc := C.ortrain_mpi_finalize(); rc != 0 {
		return &Error{fmt.Sprintf("MPI_Finalize failed (%d)", int(rc))}
	}
	return nil
}

// RootEnv is the environment OpenMPI needs to start ranks as root (in
// containers and CI): it refuses otherwise.
func RootEnv() []string {
	return []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}
}
