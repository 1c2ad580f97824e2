package graph

// DisableDropout makes every Dropout the identity, as inference wants: a
// Dropout without its training_mode input drops nothing in any runtime,
// not only in one whose optimiser removes it. A model exported in
// training mode (the export ortrain trains from) passes training_mode =
// true.
func (g *Graph) DisableDropout() {
	for _, n := range g.Nodes {
		if n.Op == "Dropout" && n.Domain == "" {
			n.Inputs = n.Inputs[:1]
		}
	}
}
