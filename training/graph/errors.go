package graph

import (
	"fmt"
	"strings"
)

// ModelError is a model file's graph that is not one ortrain can train: a
// cycle, a value nothing defines, control flow, an operator ONNX does not
// have. It is the user's to fix (exit code 2); Load prefixes the file.
type ModelError struct{ Msg string }

func (e *ModelError) Error() string { return "graph: " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *ModelError) BadInput() bool { return true }

// SortError is a graph Sort cannot order: Missing is a value Node reads
// that nothing provides, or, when Cycle is set, the nodes that read each
// other's outputs in a ring (each reads the next one's, the last the
// first's). From a model file it is a ModelError; from a graph ortrain
// built, a bug.
type SortError struct {
	Node    *Node
	Missing string
	Cycle   []*Node
	Values  []string // Cycle[k] reads Values[k], an output of Cycle[k+1]
}

func (e *SortError) Error() string {
	if len(e.Cycle) == 0 {
		return fmt.Sprintf("graph: %s reads %q, which no node, input or initializer provides", e.Node.Describe(), e.Missing)
	}
	var b strings.Builder
	for k, n := range e.Cycle {
		next := e.Cycle[(k+1)%len(e.Cycle)]
		if k > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s reads %q from %s", n.Describe(), e.Values[k], next.Describe())
	}
	return fmt.Sprintf("graph: its nodes form a cycle, which an ONNX graph cannot have: %s", b.String())
}

// fromFile makes a Sort error of a model file's graph the user's to fix.
func fromFile(err error) error {
	if se, ok := err.(*SortError); ok {
		return &ModelError{Msg: strings.TrimPrefix(se.Error(), "graph: ")}
	}
	return err
}

// stuck explains why Sort can place none of the nodes not done: a value
// read that nothing produces, else a cycle among them.
func stuck(nodes []*Node, done []bool, avail map[string]bool) *SortError {
	producer := map[string]int{}
	for i, n := range nodes {
		if !done[i] {
			for _, o := range n.Outputs {
				if o != "" {
					producer[o] = i
				}
			}
		}
	}
	first := -1
	for i, n := range nodes {
		if done[i] {
			continue
		}
		if first < 0 {
			first = i
		}
		for _, in := range n.Inputs {
			if _, made := producer[in]; !avail[in] && !made {
				return &SortError{Node: n, Missing: in}
			}
		}
	}
	// Every input missing is an output of a node not placed: following
	// them from any such node comes back round.
	var path []int
	var values []string
	at := map[int]int{}
	for i := first; ; {
		if pos, seen := at[i]; seen {
			e := &SortError{Values: values[pos:]}
			for _, k := range path[pos:] {
				e.Cycle = append(e.Cycle, nodes[k])
			}
			e.Node = e.Cycle[0]
			return e
		}
		at[i] = len(path)
		path = append(path, i)
		for _, in := range nodes[i].Inputs {
			if !avail[in] {
				values = append(values, in)
				i = producer[in]
				break
			}
		}
	}
}
