package collective

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestNCCLVersion reads ncclGetVersion's codes of both encodings.
func TestNCCLVersion(t *testing.T) {
	for code, want := range map[int]string{22703: "2.27.3", 21805: "2.18.5", 2804: "2.8.4"} {
		if got := formatNCCLVersion(code); got != want {
			t.Errorf("code %d: %s, want %s", code, got, want)
		}
	}
}

// TestGPUFor: one GPU per local rank, a lone visible GPU for any rank,
// and more ranks than GPUs refused.
func TestGPUFor(t *testing.T) {
	for _, c := range []struct{ local, count, want int }{{0, 4, 0}, {3, 4, 3}, {2, 1, 0}} {
		if got, err := GPUFor(c.local, c.count); err != nil || got != c.want {
			t.Errorf("local %d of %d GPUs: %d, %v; want %d", c.local, c.count, got, err, c.want)
		}
	}
	if _, err := GPUFor(4, 4); err == nil || !strings.Contains(err.Error(), "one GPU per rank") {
		t.Errorf("local rank 4 with 4 GPUs: %v, want a refusal", err)
	}
	if _, err := GPUFor(0, 0); err == nil {
		t.Error("no GPU: no error")
	}
}

// TestLocalRank reads the launchers' variables, OpenMPI's first.
func TestLocalRank(t *testing.T) {
	for _, k := range []string{"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"} {
		t.Setenv(k, "")
	}
	if _, ok := LocalRank(); ok {
		t.Error("a local rank without a launcher")
	}
	t.Setenv("SLURM_LOCALID", "3")
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
	if r, ok := LocalRank(); !ok || r != 1 {
		t.Errorf("local rank %d, %v; want OpenMPI's 1", r, ok)
	}
}

// TestNCCLNotFound: where NCCL does not load, the error names what was
// tried and how to point ortrain at it.
func TestNCCLNotFound(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnccl.so.2")
	t.Setenv(NCCLLibraryEnv, missing)
	_, _, err := NCCLAvailable()
	if err == nil {
		t.Fatalf("NCCL loaded from %s, which does not exist", missing)
	}
	for _, want := range []string{missing, NCCLLibraryEnv} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
