package artifacts

import (
	"github.com/ortrain/ortrain/training/graph"
)

// randomOps are the standard ONNX ops that draw random numbers, with the
// type of their seed attribute: Dropout's is an int, the others' a float.
var randomOps = map[string]bool{
	"Dropout": true, "RandomNormal": false, "RandomNormalLike": false,
	"RandomUniform": false, "RandomUniformLike": false, "Bernoulli": false, "Multinomial": false,
}

// seedRandom gives every random node of g a seed attribute derived from
// the run's seed and the node's position, replacing any the model had,
// and returns how many it seeded. Without one, ONNX Runtime draws from a
// generator it seeds from the clock once per process: the same seed would
// not train the same, and masks would not follow the run's seed. Each
// node gets its own seed, so two Dropouts of one shape do not drop the
// same elements. The generator of a seeded kernel starts at its seed when
// the session opens and advances with each run, so steps draw new masks.
func seedRandom(g *graph.Graph, seed int64) int {
	k := 0
	for _, n := range g.Nodes {
		isInt, ok := randomOps[n.Op]
		if !ok || n.Domain != "" && n.Domain != "ai.onnx" {
			continue
		}
		s := mixSeed(uint64(seed), uint64(k))
		n.DelAttr("seed")
		if isInt {
			n.Attrs = append(n.Attrs, graph.AInt("seed", int64(s>>1))) // non-negative
		} else {
			// A float attribute holds integers exactly below 2^24.
			n.Attrs = append(n.Attrs, graph.AFloat("seed", float64(s>>40)))
		}
		k++
	}
	return k
}

// mixSeed is SplitMix64's finaliser over the run's seed and a node's
// index: nearby seeds and indices give unrelated node seeds.
func mixSeed(seed, i uint64) uint64 {
	z := seed*0x9e3779b97f4a7c15 + (i+1)*0xbf58476d1ce4e5b9
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
