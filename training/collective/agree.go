package collective

import (
	"encoding/binary"
	"math"
)

// Agree checks that every rank holds the same vals (run lengths, dataset
// sizes: what must match for the ranks to call the same collectives in
// the same order). Rank 0's values are broadcast, each rank compares its
// own, and the ranks sum which differ, so every rank returns the same
// index: the first value some rank holds differently, or -1. root is rank
// 0's value there, mine this rank's.
func (c *Comm) Agree(vals []float64) (i int, root, mine float64, err error) {
	buf := make([]byte, 8*len(vals))
	for k, v := range vals {
		binary.LittleEndian.PutUint64(buf[8*k:], math.Float64bits(v))
	}
	if err := c.Broadcast(buf, 0); err != nil {
		return -1, 0, 0, err
	}
	differs := make([]float64, len(vals))
	for k, v := range vals {
		if math.Float64frombits(binary.LittleEndian.Uint64(buf[8*k:])) != v {
			differs[k] = 1
		}
	}
	if err := c.SumFloat64(differs); err != nil {
		return -1, 0, 0, err
	}
	for k, d := range differs {
		if d > 0 {
			return k, math.Float64frombits(binary.LittleEndian.Uint64(buf[8*k:])), vals[k], nil
		}
	}
	return -1, 0, 0, nil
}
