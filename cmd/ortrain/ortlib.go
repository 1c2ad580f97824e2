package main

import (
	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/telemetry"
)

// loadORTOn finds and loads ONNX Runtime for a run on device (a
// trainer.device or --device value; "" for the CPU): configLib is the run
// config's ort_lib. A GPU run takes the core built with CUDA that
// scripts/setup --cuda installs when nothing names a library, so that
// setting the device is all a user does; a CPU run keeps the CPU release.
func loadORTOn(c *cli.Context, configLib, device string) error {
	path, err := ort.FindLibrary(ort.LibrarySearch{Flag: c.String("ort-lib"), Config: configLib, CUDA: wantsCUDACore(device)})
	if err != nil {
		return err
	}
	return ort.Init(path)
}

// wantsCUDACore says whether a run on device should load a CUDA build of
// ONNX Runtime: a CUDA device, or "auto" where NVML sees a GPU (auto trains
// on GPU 0 then). A device that does not parse is the config check's to
// refuse; it loads the CPU build meanwhile.
func wantsCUDACore(device string) bool {
	switch device {
	case "", "cpu":
		return false
	case "auto":
		gpus, err := telemetry.Devices()
		return err == nil && len(gpus) > 0
	}
	d, err := ort.ParseDevice(device)
	return err == nil && d.CUDA
}

// checkpointDevice is the device a command reading a checkpoint will run
// on, as checkpointSession chooses it: --device, else the config's trainer
// (cfg may be nil: the CPU).
func checkpointDevice(c *cli.Context, cfg *config.Config) string {
	if d := c.String("device"); d != "" {
		return d
	}
	if cfg != nil {
		return cfg.Trainer.Device
	}
	return ""
}
