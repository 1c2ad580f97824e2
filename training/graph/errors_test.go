package graph

import (
	"errors"
	"strings"
	"testing"
)

// TestSortSaysWhy: Sort tells a value nothing provides from a cycle, and
// names the cycle's nodes in reading order; from a model file either is a
// ModelError, the user's to fix.
func TestSortSaysWhy(t *testing.T) {
	g := New("g", 17)
	g.AddInput("x", Info{})
	g.AddNode(&Node{Op: "Relu", Name: "first", Inputs: []string{"x"}, Outputs: []string{"a"}})
	g.AddNode(&Node{Op: "Add", Name: "p", Inputs: []string{"a", "r"}, Outputs: []string{"q"}})
	g.AddNode(&Node{Op: "Neg", Name: "s", Inputs: []string{"q"}, Outputs: []string{"r"}})
	err := g.Sort()
	var se *SortError
	if !errors.As(err, &se) || len(se.Cycle) != 2 || se.Cycle[0].Name != "p" || se.Cycle[1].Name != "s" {
		t.Fatalf("Sort of a cycle = %v; want a SortError with the cycle p, s", err)
	}
	for _, want := range []string{`Add node "p" reads "r" from Neg node "s"`, `Neg node "s" reads "q" from Add node "p"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not say %s", err, want)
		}
	}
	var me *ModelError
	if !errors.As(fromFile(err), &me) || !me.BadInput() {
		t.Errorf("fromFile(%v) is not a ModelError", err)
	}

	g = New("g", 17)
	g.AddInput("x", Info{})
	g.AddNode(&Node{Op: "Neg", Name: "n", Inputs: []string{"nowhere"}, Outputs: []string{"y"}})
	if err := g.Sort(); !errors.As(err, &se) || se.Missing != "nowhere" || len(se.Cycle) != 0 {
		t.Errorf("Sort with an undefined input = %v; want it named", err)
	}
}
