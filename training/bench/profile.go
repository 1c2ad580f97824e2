package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// OpTime is one op type's share of a profiled step: ONNX Runtime's kernel
// time per step in the training and optimizer graphs, by provider.
type OpTime struct {
	Op       string  `json:"op"`
	Provider string  `json:"provider"`
	MS       float64 `json:"ms"`    // per step
	Calls    float64 `json:"calls"` // per step
}

// NodeTime is one node's kernel time per step, with the shapes it wrote:
// which layer of a model an op's time is in.
type NodeTime struct {
	Node   string  `json:"node"`
	Op     string  `json:"op"`
	MS     float64 `json:"ms"`     // per step, all its runs
	Output string  `json:"output"` // its outputs' types and shapes, as the first run had them
}

// Profile is where a step's time goes, read from ONNX Runtime's profiles
// of the steps after the warm-up.
type Profile struct {
	Steps   int        `json:"steps"`
	MS      float64    `json:"ms"`      // kernel time per step, all ops
	Kernels float64    `json:"kernels"` // nodes run per step
	Ops     []OpTime   `json:"ops"`     // the largest first
	Nodes   []NodeTime `json:"nodes"`   // the profileNodes largest, the largest first
}

// profileNodes is how many of the largest nodes a Profile keeps.
const profileNodes = 12

// profileEvent is what ReadProfile reads of a Chrome-trace event ONNX
// Runtime writes: its runs ("model_run") and its nodes' kernel times.
type profileEvent struct {
	Cat  string  `json:"cat"`
	Name string  `json:"name"`
	TS   float64 `json:"ts"`
	Dur  float64 `json:"dur"`
	Args struct {
		Op       string          `json:"op_name"`
		Provider string          `json:"provider"`
		Output   json.RawMessage `json:"output_type_shape"`
	} `json:"args"`
}

// shapes writes ONNX Runtime's output_type_shape, [{"float":[8,64,56,56]}],
// as float[8,64,56,56]; what it cannot read as that, as it is.
func shapes(raw json.RawMessage) string {
	var ts []map[string][]int64
	if err := json.Unmarshal(raw, &ts); err != nil {
		return string(raw)
	}
	var parts []string
	for _, t := range ts {
		for typ, dims := range t {
			parts = append(parts, typ+strings.ReplaceAll(fmt.Sprint(dims), " ", ","))
		}
	}
	return strings.Join(parts, " ")
}

// ReadProfile sums the kernel times of the profiles PREFIX*.json that one
// `ortrain train --profile PREFIX` wrote for a run of warmup+steps steps of
// one micro-batch each: the sessions run once per step (the training and
// optimizer graphs), their first warmup runs left out. Sessions run a
// different number of times (the eval graph, device copies) are not the
// step's graphs and are left out too.
func ReadProfile(prefix string, warmup, steps int) (Profile, error) {
	files, err := filepath.Glob(prefix + "*.json")
	if err != nil || len(files) == 0 {
		return Profile{}, fmt.Errorf("bench: no ONNX Runtime profile %s*.json", prefix)
	}
	p := Profile{Steps: steps}
	ops := map[[2]string]*OpTime{}
	nodes := map[string]*NodeTime{}
	graphs := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return p, err
		}
		var events []profileEvent
		if err := json.Unmarshal(raw, &events); err != nil {
			return p, fmt.Errorf("bench: %s: %v", f, err)
		}
		var runs [][2]float64
		for _, e := range events {
			if e.Cat == "Session" && e.Name == "model_run" {
				runs = append(runs, [2]float64{e.TS, e.TS + e.Dur})
			}
		}
		if len(runs) != warmup+steps {
			continue
		}
		graphs++
		slices.SortFunc(runs, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
		from := runs[warmup][0]
		for _, e := range events {
			if e.Cat != "Node" || !strings.HasSuffix(e.Name, "_kernel_time") || e.TS < from {
				continue
			}
			k := [2]string{e.Args.Op, strings.TrimSuffix(e.Args.Provider, "ExecutionProvider")}
			o := ops[k]
			if o == nil {
				o = &OpTime{Op: k[0], Provider: k[1]}
				ops[k] = o
			}
			o.MS += e.Dur / 1e3
			o.Calls++
			// Node names are unique within a graph; the file keeps
			// the training and optimizer graphs' apart.
			name := strings.TrimSuffix(e.Name, "_kernel_time")
			nk := filepath.Base(f) + "\x00" + name
			nt := nodes[nk]
			if nt == nil {
				nt = &NodeTime{Node: name, Op: e.Args.Op, Output: shapes(e.Args.Output)}
				nodes[nk] = nt
			}
			nt.MS += e.Dur / 1e3
		}
	}
	if graphs == 0 {
		return p, fmt.Errorf("bench: no session in %s*.json ran %d times (%d warm-up and %d measured steps)", prefix, warmup+steps, warmup, steps)
	}
	for _, o := range ops {
		o.MS /= float64(steps)
		o.Calls /= float64(steps)
		p.MS += o.MS
		p.Kernels += o.Calls
		p.Ops = append(p.Ops, *o)
	}
	sort.Slice(p.Ops, func(i, j int) bool {
		if p.Ops[i].MS != p.Ops[j].MS {
			return p.Ops[i].MS > p.Ops[j].MS
		}
		return p.Ops[i].Op < p.Ops[j].Op
	})
	for _, n := range nodes {
		n.MS /= float64(steps)
		p.Nodes = append(p.Nodes, *n)
	}
	slices.SortFunc(p.Nodes, func(a, b NodeTime) int {
		return cmp.Or(cmp.Compare(b.MS, a.MS), cmp.Compare(a.Node, b.Node))
	})
	p.Nodes = p.Nodes[:min(len(p.Nodes), profileNodes)]
	return p, nil
}

// profileRows is how many ops ProfileTable lists before the rest.
const profileRows = 15

// ProfileTable prints where each profiled case's step goes: its kernel
// time by op, the largest first.
func ProfileTable(w io.Writer, rs []Speed) {
	for _, r := range rs {
		p := r.Profile
		if p == nil {
			continue
		}
		how := "ONNX Runtime's profile of the measured steps"
		if strings.HasPrefix(r.Device, "cuda") {
			how += ", launches synchronous"
		}
		fmt.Fprintf(w, "\nwhere a %s step goes (ortrain on %s, %s; %s): %.1f ms of kernel time in %.0f nodes\n",
			r.Case, r.Device, r.Precision, how, p.MS, p.Kernels)
		fmt.Fprintf(w, "%-26s %-8s %9s %10s %6s\n", "op", "provider", "ms/step", "calls/step", "share")
		rest := OpTime{Op: "rest"}
		for i, o := range p.Ops {
			if i >= profileRows {
				rest.MS += o.MS
				rest.Calls += o.Calls
				continue
			}
			fmt.Fprintf(w, "%-26s %-8s %9.2f %10.1f %5.1f%%\n", o.Op, o.Provider, o.MS, o.Calls, 100*o.MS/max(p.MS, 1e-9))
		}
		if n := len(p.Ops) - profileRows; n > 0 {
			fmt.Fprintf(w, "%-26s %-8s %9.2f %10.1f %5.1f%%\n", fmt.Sprintf("%d other ops", n), "", rest.MS, rest.Calls, 100*rest.MS/max(p.MS, 1e-9))
		}
		if len(p.Nodes) > 0 {
			fmt.Fprintf(w, "its %d slowest nodes:\n%9s  %-22s %s\n", len(p.Nodes), "ms/step", "op", "node → output")
			for _, n := range p.Nodes {
				fmt.Fprintf(w, "%9.2f  %-22s %s → %s\n", n.MS, n.Op, n.Node, n.Output)
			}
		}
	}
}
