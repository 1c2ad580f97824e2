package metrics

import (
	"math"
	"math/big"
	"math/bits"
)

// exactWords is the width of exactSum in 64-bit words. A finite float64 is an
// integer multiple of 2^-1074 below 2^1024, so it spans 2098 bits; 64 more
// bits absorb 2^63 additions without overflow, and one more holds the sign.
const exactWords = 34

// exactSum is a sum of finite float64 values kept without rounding, as a
// two's-complement fixed-point integer whose least significant bit is worth
// 2^-1074 (the smallest subnormal float64). Addition is exact, hence
// associative and commutative: the sum does not depend on the order in which
// values are added or partial sums merged. The zero value is an empty sum and
// it may be copied freely.
type exactSum struct {
	w [exactWords]uint64
}

// add adds v, which must be finite.
func (s *exactSum) add(v float64) {
	if v == 0 {
		return
	}
	b := math.Float64bits(v)
	exp := int(b >> 52 & 0x7ff)
	mant := b & (1<<52 - 1)
	if exp == 0 {
		exp = 1
	} else {
		mant |= 1 << 52
	}
	// v = ±mant · 2^(exp-1075) = ±(mant << (exp-1)) · 2^-1074.
	shift := exp - 1
	i, off := shift/64, uint(shift%64)
	lo, hi := mant<<off, mant>>(64-off)
	if off == 0 {
		hi = 0
	}
	var c uint64
	if b>>63 == 0 {
		s.w[i], c = bits.Add64(s.w[i], lo, 0)
		s.w[i+1], c = bits.Add64(s.w[i+1], hi, c)
		for j := i + 2; c != 0 && j < exactWords; j++ {
			s.w[j], c = bits.Add64(s.w[j], 0, c)
		}
		return
	}
	s.w[i], c = bits.Sub64(s.w[i], lo, 0)
	s.w[i+1], c = bits.Sub64(s.w[i+1], hi, c)
	for j := i + 2; c != 0 && j < exactWords; j++ {
		s.w[j], c = bits.Sub64(s.w[j], 0, c)
	}
}

// merge adds the sum o to s.
func (s *exactSum) merge(o *exactSum) {
	var c uint64
	for j := range s.w {
		s.w[j], c = bits.Add64(s.w[j], o.w[j], c)
	}
}

// value returns the sum rounded to the nearest float64 (ties to even), ±Inf
// if it is beyond the float64 range.
func (s *exactSum) value() float64 {
	w := s.w
	neg := w[exactWords-1]>>63 == 1
	if neg {
		var c uint64 = 1
		for j := range w {
			w[j], c = bits.Add64(^w[j], 0, c)
		}
	}
	buf := make([]byte, 8*exactWords)
	for j, x := range w {
		for k := range 8 {
			buf[len(buf)-1-8*j-k] = byte(x >> (8 * k))
		}
	}
	var f big.Float
	f.SetInt(new(big.Int).SetBytes(buf))
	f.SetMantExp(&f, -1074)
	v, _ := f.Float64()
	if neg {
		v = -v
	}
	return v
}
