package bench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeProfile writes an ONNX Runtime profile of runs runs of a session,
// each running the nodes given as op → kernel µs, one after the other.
func writeProfile(t *testing.T, path string, runs int, nodes [][2]any) {
	t.Helper()
	var events []map[string]any
	ts := 100.0
	for range runs {
		start := ts
		for _, n := range nodes {
			events = append(events, map[string]any{"cat": "Node", "name": n[0].(string) + "_node_kernel_time", "ts": ts, "dur": n[1],
				"args": map[string]any{"op_name": n[0], "provider": "CUDAExecutionProvider", "output_type_shape": []map[string][]int{{"float": {8, 4}}}}})
			ts += n[1].(float64) + 1
		}
		events = append(events, map[string]any{"cat": "Session", "name": "model_run", "ts": start, "dur": ts - start})
		ts += 50
	}
	raw, err := json.Marshal(events)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadProfile: the step's graphs (sessions run once per step) are
// summed over the measured steps, their warm-up runs left out; a session
// run a different number of times (validation, device copies) is not.
func TestReadProfile(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "ort")
	// The training and optimizer graphs: 2 warm-up and 3 measured runs.
	writeProfile(t, prefix+"_train.json", 5, [][2]any{{"Conv", 10.0}, {"Relu", 2.0}})
	writeProfile(t, prefix+"_opt.json", 5, [][2]any{{"Mul", 4.0}})
	writeProfile(t, prefix+"_eval.json", 1, [][2]any{{"Conv", 500.0}})
	p, err := ReadProfile(prefix, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]float64{"Conv": {0.010, 1}, "Relu": {0.002, 1}, "Mul": {0.004, 1}}
	if len(p.Ops) != 3 || p.Kernels != 3 || math.Abs(p.MS-0.016) > 1e-12 || p.Ops[0].Op != "Conv" {
		t.Fatalf("profile %+v: want Conv, Mul, Relu, 0.016 ms in 3 kernels a step", p)
	}
	for _, o := range p.Ops {
		if w := want[o.Op]; math.Abs(o.MS-w[0]) > 1e-12 || o.Calls != w[1] || o.Provider != "CUDA" {
			t.Errorf("%+v: want %v ms, %v call a step on CUDA", o, w[0], w[1])
		}
	}
	// The slowest nodes, by name, with what they wrote; the eval graph's
	// Conv (run once) is not among them.
	if len(p.Nodes) != 3 || p.Nodes[0].Node != "Conv_node" || p.Nodes[0].Op != "Conv" || math.Abs(p.Nodes[0].MS-0.010) > 1e-12 ||
		p.Nodes[0].Output != "float[8,4]" || p.Nodes[1].Op != "Mul" {
		t.Errorf("nodes %+v: want Conv_node (0.010 ms, float[8,4]), then Mul's", p.Nodes)
	}
	// The warm-up runs count for nothing (cuDNN's algorithm search):
	// made slow, the result is the same.
	var events []map[string]any
	raw, _ := os.ReadFile(prefix + "_train.json")
	json.Unmarshal(raw, &events)
	for _, e := range events[:6] { // the first two runs: 2 nodes and a model_run each
		if e["cat"] == "Node" {
			e["dur"] = 1000.0
		}
	}
	raw, _ = json.Marshal(events)
	os.WriteFile(prefix+"_train.json", raw, 0o644)
	if q, err := ReadProfile(prefix, 2, 3); err != nil || math.Abs(q.MS-p.MS) > 1e-12 {
		t.Errorf("slow warm-up runs: %+v, %v; want them left out (%v ms)", q, err, p.MS)
	}
	if _, err := ReadProfile(prefix, 1, 3); err == nil || !strings.Contains(err.Error(), "ran 4 times") {
		t.Errorf("no session run 4 times: %v, want an error saying so", err)
	}
}
