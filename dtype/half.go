package dtype

import "math"

// ToBFloat16 rounds f to the nearest bfloat16, ties to even; NaN stays NaN.
func ToBFloat16(f float32) BFloat16Bits {
	b := math.Float32bits(f)
	if f != f {
		return BFloat16Bits(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return BFloat16Bits(b >> 16)
}

// Float32 widens a bfloat16 exactly.
func (h BFloat16Bits) Float32() float32 { return math.Float32frombits(uint32(h) << 16) }

// ToFloat16 rounds f to the nearest IEEE half, ties to even, with subnormals,
// overflow to infinity and NaN kept.
func ToFloat16(f float32) Float16Bits {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return Float16Bits(sign | 0x7e00)
	case exp >= 0x1f: // overflow or infinity
		return Float16Bits(sign | 0x7c00)
	case exp <= 0: // subnormal half, or zero
		if exp < -10 {
			return Float16Bits(sign)
		}
		man |= 0x800000
		shift := uint32(14 - exp)
		half := man >> shift
		rem := man & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || rem == mid && half&1 == 1 {
			half++
		}
		return Float16Bits(sign | uint16(half))
	}
	half := uint32(exp)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && half&1 == 1 {
		half++ // may carry into the exponent, which is the right rounding
	}
	return Float16Bits(sign | uint16(half))
}

// Float32 widens a half exactly.
func (h Float16Bits) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}
