package graph

// DimRoot returns the value and axis whose size dimension axis of value is
// known to equal: the earliest one FoldShapes traced it to (a Conv's batch
// is its input's), following nodes added since that keep every dimension
// of their first input (the Casts mixed precision inserts). Sizes unknown
// before the run can so be read once from one tensor for all the values
// that share them. It returns value and axis themselves when nothing
// earlier is known.
func (g *Graph) DimRoot(value string, axis int) (string, int) {
	var prod map[string]*Node
	for {
		if r, ok := g.dimRoots[value]; ok && axis < len(r) && r[axis].value != "" {
			return r[axis].value, r[axis].axis
		}
		if prod == nil {
			prod = g.Producers()
		}
		p := prod[value]
		if p == nil || !sameDimOps[p.Op] || len(p.Inputs) == 0 || g.Infos[p.Inputs[0]].Rank() != g.Infos[value].Rank() {
			return value, axis
		}
		value = p.Inputs[0]
	}
}
