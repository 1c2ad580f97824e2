package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/training/collective"
	"github.com/ortrain/ortrain/training/config"
)

// stopFileEnv names, in ranks ortrain started itself, a file whose
// appearance stops training as a first SIGINT stops one process: the step
// ends on every rank and rank 0 writes a checkpoint. mpirun, signalled,
// would kill the ranks before they checkpoint.
const stopFileEnv = "ORTRAIN_STOP_FILE"

// invocation is the command line run was given; spawnRanks repeats it.
var invocation []string

// rankCommand is what spawnRanks starts under mpirun: this executable and
// the command line (tests replace it with their own binary).
var rankCommand = func() ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return append([]string{self}, invocation[1:]...), nil
}

// ranksFailed is mpirun's exit after a rank failed; the ranks have said
// why. A rank's refusal (exit 2) stays a refusal.
type ranksFailed struct{ code int }

func (e ranksFailed) Error() string {
	return fmt.Sprintf("a rank failed (mpirun exit status %d); its message is above", e.code)
}
func (e ranksFailed) BadInput() bool { return e.code == 2 }

// spawnRanks runs a data-parallel job of world ranks on this machine, as
// Lightning does for devices = N: it starts this command world times under
// OpenMPI's mpirun (which the ranks join as if a user had typed it), in a
// process group of its own so that a terminal's Ctrl-C reaches only this
// process, which asks the ranks to stop (stopFileEnv); a second one kills
// them.
func spawnRanks(c *cli.Context, cfg *config.Config, world int, gpus bool) error {
	if cfg.Trainer.NumNodes > 1 {
		return &config.Error{Key: "trainer.num_nodes", Msg: fmt.Sprintf("%d nodes: ortrain starts ranks on this machine only; start them on every node with a launcher (srun, or mpirun -np %d --host ...)", cfg.Trainer.NumNodes, world)}
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		return &config.Error{Key: "trainer.devices", Msg: fmt.Sprintf("%d processes: ortrain starts them with OpenMPI's mpirun, which is not on the path (Debian: apt-get install openmpi-bin); or start them with srun", world)}
	}
	if _, err := collective.Available(); err != nil {
		return &config.Error{Key: "trainer.devices", Msg: err.Error()}
	}
	if gpus {
		if _, _, err := collective.NCCLAvailable(); err != nil {
			return &config.Error{Key: "trainer.devices", Msg: fmt.Sprintf("%d ranks on GPUs sum their gradients with NCCL: %v", world, err)}
		}
	}
	command, err := rankCommand()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ortrain-job-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	stop := filepath.Join(dir, "stop")
	// --bind-to none: each rank's ONNX Runtime threads may use every core
	// (mpirun would pin each rank to one); --oversubscribe: more ranks
	// than cores is the user's choice on a CPU.
	cmd := exec.Command(mpirun, append([]string{"--bind-to", "none", "--oversubscribe", "-np", strconv.Itoa(world)}, command...)...)
	cmd.Env = append(append(os.Environ(), collective.RootEnv()...), stopFileEnv+"="+stop)
	cmd.Stdout, cmd.Stderr = c.App.Writer, c.App.ErrWriter
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	fmt.Fprintf(c.App.ErrWriter, "ortrain: starting %d rank%s on this machine: %s -np %d ...\n", world, plural(world), mpirun, world)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", mpirun, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	asked := false
	var first firstSignal
	for {
		select {
		case err := <-done:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return ranksFailed{exit.ExitCode()}
			}
			return err
		case sig := <-sigs:
			if !first.again(sig) { // the first, or it again (see repeatWindow)
				if asked {
					continue
				}
				asked = true
				fmt.Fprintln(c.App.ErrWriter, "\nortrain: interrupted; the ranks finish the step and rank 0 writes a checkpoint (again to exit now)")
				if err := os.WriteFile(stop, nil, 0o644); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintln(c.App.ErrWriter, "ortrain: killing the ranks without a new checkpoint")
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			os.Exit(130)
		}
	}
}

// watchStopFile cancels training when the file stopFileEnv names appears:
// how ranks ortrain started learn of a Ctrl-C (see spawnRanks).
func watchStopFile(cancel func(), quit <-chan struct{}) {
	path := os.Getenv(stopFileEnv)
	if path == "" {
		return
	}
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				if _, err := os.Stat(path); err == nil {
					cancel()
					return
				}
			}
		}
	}()
}

// rankGPU is the GPU a rank of a data-parallel job trains on. With one
// rank per machine the configured device stands ("cuda:2"); with several,
// each takes the GPU of its local rank, as Lightning's devices = N does,
// and a device index in the configuration is refused as ambiguous.
func rankGPU(cfg *config.Config, configured int) (int, error) {
	local, ok := collective.LocalRank()
	perNode := max(1, cfg.Trainer.Devices)
	if !ok || perNode == 1 {
		return configured, nil
	}
	if dev := cfg.Trainer.Device; dev != "cuda" && dev != "gpu" && dev != "auto" {
		return 0, &config.Error{Key: "trainer.device", Msg: fmt.Sprintf("%q with trainer.devices = %d: each rank takes the GPU of its local rank; set trainer.device = \"cuda\" (and CUDA_VISIBLE_DEVICES to choose the GPUs)", dev, perNode)}
	}
	count, err := collective.CUDADeviceCount()
	if err != nil {
		return 0, &config.Error{Key: "trainer.device", Msg: err.Error()}
	}
	gpu, err := collective.GPUFor(local, count)
	if err != nil {
		return 0, &config.Error{Key: "trainer.devices", Msg: err.Error()}
	}
	return gpu, nil
}

// plural is the "s" of a count other than one.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
