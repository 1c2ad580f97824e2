package plan

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/setup"
)

// The profiles in testdata measured graphs that ortrain no longer builds
// once its rules improve, so the calibration predicts those graphs, not
// today's: testdata/costs-*.tsv holds each profiled graph's nodes as the
// step-time model sees them (op, placement, efficiency class, the peak
// rate its work runs at, FLOPs and bytes at batch 256), identical nodes
// counted once. TestWriteGraphCosts writes such a file from artifacts.

// Rate names in the cost files: which of a GPU's peaks a node's work runs at.
var rateNames = []string{"tensor16", "tf32", "fp32"}

func rateOf(gpu GPU, name string) (float64, bool) {
	switch name {
	case "tensor16":
		return gpu.Tensor16, true
	case "tf32":
		return gpu.TF32, true
	case "fp32":
		return gpu.FP32, true
	}
	return 0, false
}

var placeNames = map[placement]string{onGPU: "gpu", onCPU: "cpu", elided: "elided"}

// TestWriteGraphCosts writes the cost file of the artifacts in
// $ORTRAIN_COSTS_ARTIFACTS (or those a CUDA run of the preset
// $ORTRAIN_COSTS_PRESET builds, with $ORTRAIN_COSTS_SET's space-separated
// key=value overrides) at batch $ORTRAIN_COSTS_BATCH (default 256)
// on an H200's rates to $ORTRAIN_COSTS_OUT, for a graph about to be
// profiled; skipped without.
func TestWriteGraphCosts(t *testing.T) {
	dir, preset, out := os.Getenv("ORTRAIN_COSTS_ARTIFACTS"), os.Getenv("ORTRAIN_COSTS_PRESET"), os.Getenv("ORTRAIN_COSTS_OUT")
	if dir == "" && preset == "" || out == "" {
		t.Skip("set ORTRAIN_COSTS_ARTIFACTS or ORTRAIN_COSTS_PRESET, and ORTRAIN_COSTS_OUT, to write a cost file")
	}
	batch := int64(256)
	if b := os.Getenv("ORTRAIN_COSTS_BATCH"); b != "" {
		var err error
		if batch, err = strconv.ParseInt(b, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	if preset != "" {
		c, err := configs.Load(preset)
		if err != nil {
			t.Fatal(err)
		}
		c.Data.BatchSize = int(batch)
		if sets := os.Getenv("ORTRAIN_COSTS_SET"); sets != "" {
			if err := c.Override(strings.Fields(sets)...); err != nil {
				t.Fatal(err)
			}
		}
		if dir, _, err = setup.Artifacts(c, t.TempDir(), ort.Options{Device: ort.CUDADevice(0)}); err != nil {
			t.Fatal(err)
		}
	}
	gpu := GPUs["h200"]
	train, opt, o, err := loadStep(dir, batch, StepOptions{TF32: true})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for i, g := range []string{"train", "opt"} {
		gr := train
		if i == 1 {
			gr = opt
		}
		for _, c := range costGraph(gr, gpu, o) {
			rate := "-"
			if c.where == onGPU {
				for _, r := range rateNames {
					if v, _ := rateOf(gpu, r); v == c.rate {
						rate = r
						break
					}
				}
			}
			class := c.class
			if class == "" {
				class = "-"
			}
			count[fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f", g, c.op, placeNames[c.where], class, rate, c.flops, c.bytes)]++
		}
	}
	rows := make([]string, 0, len(count))
	for k, n := range count {
		rows = append(rows, fmt.Sprintf("%s\t%d", k, n))
	}
	sort.Strings(rows)
	text := fmt.Sprintf("# graph\top\twhere\tclass\trate\tflops\tbytes\tcount\n# host_bytes\t%d\n%s\n", o.HostBytes, strings.Join(rows, "\n"))
	if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readCosts reads a cost file back into node costs priced on gpu with
// today's efficiencies.
func readCosts(t *testing.T, path string, gpu GPU) (costs [2][]nodeCost, _ GPU, hostBytes int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	places := map[string]placement{}
	for p, n := range placeNames {
		places[n] = p
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "# host_bytes\t"); ok {
			if hostBytes, err = strconv.ParseInt(h, 10, 64); err != nil {
				t.Fatalf("%s: host_bytes %q", path, h)
			}
			continue
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		fs := strings.Split(line, "\t")
		if len(fs) != 8 {
			t.Fatalf("%s: %q: want graph, op, where, class, rate, flops, bytes, count", path, line)
		}
		flops, err1 := strconv.ParseFloat(fs[5], 64)
		bytes, err2 := strconv.ParseFloat(fs[6], 64)
		n, err3 := strconv.Atoi(fs[7])
		where, ok := places[fs[2]]
		if err1 != nil || err2 != nil || err3 != nil || !ok || (fs[0] != "train" && fs[0] != "opt") {
			t.Fatalf("%s: %q: bad field", path, line)
		}
		c := nodeCost{op: fs[1], where: where, flops: flops, bytes: bytes}
		if where == onGPU {
			if _, known := efficiencies[fs[3]]; !known {
				t.Fatalf("%s: %q: unknown class %q", path, line, fs[3])
			}
			if c.rate, ok = rateOf(gpu, fs[4]); !ok {
				t.Fatalf("%s: %q: unknown rate %q", path, line, fs[4])
			}
			c.class = fs[3]
			c.seconds = kernelSeconds(c.class, c.rate, flops, bytes, gpu)
		}
		i := 0
		if fs[0] == "opt" {
			i = 1
		}
		for range n {
			costs[i] = append(costs[i], c)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return costs, gpu, hostBytes
}
