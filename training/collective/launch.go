package collective

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// ErrNoMpirun is Mpirun's error where OpenMPI's launcher is not installed.
var ErrNoMpirun = errors.New("collective: no mpirun (Debian: apt-get install openmpi-bin)")

// Mpirun starts n copies of command under OpenMPI's mpirun (more ranks
// than cores allowed, as root allowed: tests and containers) with env
// added to this process's environment, and returns their combined output.
func Mpirun(n int, env []string, command ...string) (string, error) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		return "", ErrNoMpirun
	}
	cmd := exec.Command(mpirun, append([]string{"--oversubscribe", "-np", fmt.Sprint(n)}, command...)...)
	cmd.Env = append(append(os.Environ(), RootEnv()...), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
