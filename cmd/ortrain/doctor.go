package main

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/collective"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/telemetry"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check that ONNX Runtime loads and which devices can train",
		Description: `Prints ortrain's and ONNX Runtime's versions, the library path, the
execution providers, the GPUs NVML sees (name, memory, driver), and whether a
session runs on the CPU and on a CUDA device. On each device that opens it
then trains a small model (Conv, Slice with constant starts, ScatterElements
with add, reductions, an MSE loss, its backward, an SGD update) for 3 steps
and compares the losses and weights with the CPU's; when they disagree or a
run fails it runs each op alone and names the one that fails. Exits 0 when
the CPU works and every device that opens trains as the CPU does, 1 when a
training check fails.

Example:
   ortrain doctor
   ortrain --ort-lib /opt/ort-cuda/lib/libonnxruntime.so doctor --device cuda:1`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "device", Value: "cuda:0", Usage: "the CUDA device to try"},
		},
		Action: doctor,
	}
}

func doctor(c *cli.Context) error {
	w := c.App.Writer
	fmt.Fprintf(w, "ortrain        %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if err := loadORTOn(c, "", c.String("device")); err != nil {
		return err
	}
	fmt.Fprintf(w, "ONNX Runtime   %s\n", ort.Version())
	fmt.Fprintf(w, "library        %s\n", ort.LibraryPath())
	providers, err := ort.AvailableProviders()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "providers      %s\n", strings.Join(providers, ", "))
	if err := ort.CheckDevice(ort.CPU, ort.Options{}); err != nil {
		return fmt.Errorf("the CPU path does not work: %w", err)
	}
	fmt.Fprintf(w, "cpu            ok (session, copy to and from the device)\n")
	// A training check on the CPU too: the same graphs against plain host
	// runs, so that the check itself is proven wherever doctor runs.
	trainErr := doctorTraining(w, ort.CPU)

	dev, err := ort.ParseDevice(c.String("device"))
	if err != nil {
		return err
	}
	gpus, err := telemetry.Devices()
	switch {
	case err != nil:
		fmt.Fprintf(w, "gpus           NVML present but failing: %v\n", err)
	case len(gpus) == 0:
		fmt.Fprintf(w, "gpus           none (no NVIDIA driver found)\n")
	}
	for _, g := range gpus {
		fmt.Fprintf(w, "gpu %-10d %s, %.1f GiB, driver %s\n", g.Index, g.Name, float64(g.MemoryTotal)/(1<<30), g.Driver)
	}
	// Data parallel: the MPI library ranks load, and the launcher.
	if lib, err := collective.Available(); err != nil {
		fmt.Fprintf(w, "mpi            not available: %v\n", err)
	} else if launcher, err := exec.LookPath("mpirun"); err != nil {
		fmt.Fprintf(w, "mpi            %s loads; no mpirun on the path (srun, or apt-get install openmpi-bin)\n", lib)
	} else {
		fmt.Fprintf(w, "mpi            ok: %s, launcher %s (data parallel: gradients of CPU ranks, every rank's scalars)\n", lib, launcher)
	}
	if lib, version, err := collective.NCCLAvailable(); err != nil {
		fmt.Fprintf(w, "nccl           not available (data parallel on GPUs needs it): %v\n", err)
	} else {
		fmt.Fprintf(w, "nccl           ok: %s %s (data parallel: gradients of GPU ranks)\n", lib, version)
	}
	switch {
	case !dev.CUDA:
		// The CPU's lines are above.
	case !contains(providers, "CUDAExecutionProvider"):
		fmt.Fprintf(w, "%-14s not available: %s\n", dev, noCUDAProvider())
	default:
		if err := ort.CheckDevice(dev, ort.Options{}); err != nil {
			msg := shortORTError(err)
			switch {
			case strings.Contains(msg, "Failed to load library") && ort.CUDAProviderBeside() != "":
				// The provider is there; what it links against is not.
				msg = "the CUDA provider " + ort.CUDAProviderBeside() + " does not load (" + msg + "): it needs an NVIDIA GPU and driver, and the CUDA runtime, cuBLAS and cuDNN of its CUDA version on the library path (LD_LIBRARY_PATH)"
			case strings.Contains(msg, "Failed to load library"):
				// The CPU builds on npm list CUDA among their providers but
				// ship none of its libraries.
				msg = "this ONNX Runtime has no CUDA provider library beside it (" + msg + "); " + installCUDA()
			}
			fmt.Fprintf(w, "%-14s not usable: %s\n", dev, msg)
		} else {
			fmt.Fprintf(w, "%-14s ok (session, copy to and from the device)\n", dev)
			if err := doctorTraining(w, dev); err != nil {
				trainErr = err
			}
		}
	}
	return trainErr
}

// usableDevice refuses a CUDA device this ONNX Runtime cannot open, as
// doctor would judge it, before anything is built for it: key names the
// setting that chose it.
func usableDevice(key string, opts ort.Options) error {
	if !opts.Device.CUDA {
		return nil
	}
	providers, _ := ort.AvailableProviders()
	if !contains(providers, "CUDAExecutionProvider") {
		return &config.Error{Key: key, Msg: fmt.Sprintf("%v: %s (ortrain doctor --device %v checks it), or train on \"cpu\"", opts.Device, noCUDAProvider(), opts.Device)}
	}
	if err := ort.CheckDevice(opts.Device, ort.Options{}); err != nil {
		return &config.Error{Key: key, Msg: fmt.Sprintf("%v is not usable with %s: %s (ortrain doctor --device %v says more)", opts.Device, ort.LibraryPath(), shortORTError(err), opts.Device)}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// shortORTError drops the source location ONNX Runtime puts before its message.
func shortORTError(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "FAIL : "); i >= 0 {
		msg = msg[i+len("FAIL : "):]
	}
	return strings.TrimSpace(msg)
}

// noCUDAProvider says why the loaded ONNX Runtime cannot train on a GPU
// when CUDA is not among its providers. A CPU-only core with the CUDA
// provider beside it (asus4's com.github.asus4.onnxruntime) could take the
// provider only as a plugin (RegisterExecutionProviderLibrary): on an H200
// that route crashed in every training graph, so ortrain refuses it.
func noCUDAProvider() string {
	if p := ort.CUDAProviderBeside(); p != "" {
		return fmt.Sprintf("this ONNX Runtime (%s) is a CPU-only build with %s beside it, which only the plugin execution-provider route can use, and ortrain does not: that route crashed in every training graph on a GPU (SIGSEGV in Slice; ScatterElements with add failed); %s",
			ort.LibraryPath(), p, installCUDA())
	}
	return fmt.Sprintf("this ONNX Runtime (%s) lists no CUDA provider; %s", ort.LibraryPath(), installCUDA())
}

// installCUDA says how to get an ONNX Runtime that trains on a GPU.
func installCUDA() string {
	return fmt.Sprintf("run scripts/setup --cuda, which installs ONNX Runtime %s built with CUDA and its CUDA provider into .cache/ort-cuda/%s (a run on a GPU takes it from there), or pass --ort-lib (or set $%s to) such a core: .cache/ort-cuda/%s/libonnxruntime.so.1, or the official onnxruntime-linux-x64-gpu release's lib/libonnxruntime.so.1",
		ort.CUDAVersion, ort.CUDAVersion, ort.LibraryEnv, ort.CUDAVersion)
}
