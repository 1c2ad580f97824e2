package metrics

// Totals of the accumulators as float64 vectors, for summing across the
// ranks of a data-parallel run (which sum float64s): a rank's totals are
// added to another's with AddTotals. Counts stay exact below 2^53.

// Totals are t's per-rank hit counts and its sample count.
func (t *TopK) Totals() []float64 {
	out := make([]float64, 0, TopKMax+1)
	for _, h := range t.hits {
		out = append(out, float64(h))
	}
	return append(out, float64(t.n))
}

// AddTotals adds another TopK's Totals to t.
func (t *TopK) AddTotals(v []float64) {
	for i := range t.hits {
		t.hits[i] += int64(v[i])
	}
	t.n += int64(v[TopKMax])
}

// Totals are p's summed NLL and token count.
func (p *Perplexity) Totals() []float64 { return []float64{p.nll.value(), float64(p.tokens)} }

// AddTotals adds another Perplexity's Totals to p.
func (p *Perplexity) AddTotals(v []float64) {
	p.nll.add(v[0])
	p.tokens += int64(v[1])
}

// Totals are m's sum and count.
func (m *Mean) Totals() []float64 { return []float64{m.sum.value(), float64(m.n)} }

// AddTotals adds another Mean's Totals to m.
func (m *Mean) AddTotals(v []float64) {
	m.sum.add(v[0])
	m.n += int64(v[1])
}
