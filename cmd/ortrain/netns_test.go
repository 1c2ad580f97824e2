package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/collective"
)

// TestDataParallelAcrossNetworkNamespaces: two "machines" on one box, each
// rank in a network namespace of its own joined by a veth pair, so MPI's
// traffic crosses a network link as between hosts. mpirun starts the far
// rank through an agent in place of ssh (ip netns exec); the job trains as
// one process with the whole batch, as on one machine. Needs root and
// ip(8); skipped otherwise.
func TestDataParallelAcrossNetworkNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("no ip(8) (iproute2)")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip(collective.ErrNoMpirun)
	}
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())

	// Namespaces and addresses of this test process alone.
	id := os.Getpid() % 200
	nsA, nsB := fmt.Sprintf("ortrain%dA", os.Getpid()), fmt.Sprintf("ortrain%dB", os.Getpid())
	addrA, addrB := fmt.Sprintf("10.231.%d.1", id), fmt.Sprintf("10.231.%d.2", id)
	sh := func(args ...string) error {
		out, err := exec.Command(ip, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := sh("netns", "add", nsA); err != nil {
		t.Skipf("cannot make network namespaces here: %v", err)
	}
	t.Cleanup(func() { sh("netns", "del", nsA) })
	if err := sh("netns", "add", nsB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh("netns", "del", nsB) }) // takes the veth pair with it
	for _, args := range [][]string{
		{"link", "add", "v" + nsA, "type", "veth", "peer", "name", "v" + nsB},
		{"link", "set", "v" + nsA, "netns", nsA}, {"link", "set", "v" + nsB, "netns", nsB},
		{"-n", nsA, "addr", "add", addrA + "/24", "dev", "v" + nsA}, {"-n", nsB, "addr", "add", addrB + "/24", "dev", "v" + nsB},
		{"-n", nsA, "link", "set", "v" + nsA, "up"}, {"-n", nsB, "link", "set", "v" + nsB, "up"},
		{"-n", nsA, "link", "set", "lo", "up"}, {"-n", nsB, "link", "set", "lo", "up"},
	} {
		if err := sh(args...); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	agent := filepath.Join(root, "netns-agent")
	script := fmt.Sprintf("#!/bin/sh\n# mpirun's remote shell: run the command in the host address's namespace\nhost=$1; shift\ncase $host in %s) ns=%s;; %s) ns=%s;; *) echo \"no namespace for $host\" >&2; exit 1;; esac\nexec %s netns exec $ns sh -c \"$*\"\n",
		addrA, nsA, addrB, nsB, ip)
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	cfg := ddpConfig(t, root)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("one process: exit %d: %s", code, errOut.String())
	}
	args := strings.Join([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.devices=2", "--set", "data.batch_size=2"}, "\x1f")
	subnet := fmt.Sprintf("10.231.%d.0/24", id)
	cmd := exec.Command(ip, "netns", "exec", nsA, mpirun, "--host", addrA+","+addrB, "-np", "2",
		"--mca", "plm_rsh_agent", agent, "--mca", "btl", "tcp,self",
		"--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet,
		"-x", "ORTRAIN_TEST_DDP_ARGS", "-x", ort.LibraryEnv,
		os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v")
	cmd.Env = append(append(os.Environ(), collective.RootEnv()...), "ORTRAIN_TEST_DDP_ARGS="+args)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun across %s and %s: %v\n%s", nsA, nsB, err, msg)
	}
	if !strings.Contains(string(msg), "data-parallel over 2 ranks") {
		t.Errorf("rank 0 does not say it runs data-parallel:\n%s", msg)
	}
	versions, _ := filepath.Glob(filepath.Join(root, "outputs", "vq", "version_*"))
	if len(versions) != 2 {
		t.Fatalf("run directories %v: want the single run's and rank 0's only", versions)
	}
	one, two := tensors(t, filepath.Join(versions[0], "checkpoints", "last")), tensors(t, filepath.Join(versions[1], "checkpoints", "last"))
	worst, _ := worstDifference(one, two)
	// The gradients crossed the link: for each step's sum, rank 0 sends at
	// least half of every gradient (float32), whatever MPI's algorithm.
	m, err := artifacts.Load(filepath.Join(versions[1], "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	params := m.ParamCount()
	stats, err := exec.Command(ip, "-n", nsA, "-s", "-j", "link", "show", "dev", "v"+nsA).Output()
	if err != nil {
		t.Fatal(err)
	}
	var link []struct {
		Stats struct {
			TX struct{ Bytes int64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(stats, &link); err != nil || len(link) != 1 {
		t.Fatalf("ip -s -j link show: %v: %s", err, stats)
	}
	if sent, least := link[0].Stats.TX.Bytes, 50*4*params/2; sent < least {
		t.Errorf("rank 0's namespace sent %d bytes over the link; 50 steps of %d gradients need at least %d", sent, params, least)
	}
	t.Logf("2 ranks in 2 network namespaces against 1 process after 50 steps: worst weight difference %.2g; %d bytes sent over the link", worst, link[0].Stats.TX.Bytes)
	if worst > 1e-3 || len(one) != len(two) {
		t.Errorf("weights after 50 steps differ by %.2g: the ranks across the link did not train as one process", worst)
	}
}
