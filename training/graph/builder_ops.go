package graph

// More of the builder vocabulary: the ops the rules for decoders,
// quantisers and transformers emit, and that model recipes use.

// Erf emits the ONNX Erf op.
func (b *Builder) Erf(x string) string { return b.Op("Erf", []string{x}) }

// Sin emits the ONNX Sin op.
func (b *Builder) Sin(x string) string { return b.Op("Sin", []string{x}) }

// Cos emits the ONNX Cos op.
func (b *Builder) Cos(x string) string { return b.Op("Cos", []string{x}) }

// Not emits the ONNX Not op.
func (b *Builder) Not(x string) string { return b.Op("Not", []string{x}) }

// And emits the ONNX And op.
func (b *Builder) And(x, y string) string { return b.Op("And", []string{x, y}) }

// Or is the element-wise logical or.
func (b *Builder) Or(x, y string) string { return b.Op("Or", []string{x, y}) }

// Less emits the ONNX Less op.
func (b *Builder) Less(x, y string) string { return b.Op("Less", []string{x, y}) }

// Softmax normalises exponentials along axis.
func (b *Builder) Softmax(x string, axis int64) string {
	return b.Op("Softmax", []string{x}, AInt("axis", axis))
}

// Concat joins values along axis.
func (b *Builder) Concat(axis int64, xs ...string) string {
	return b.Op("Concat", xs, AInt("axis", axis))
}

// Flatten reshapes x to 2-D: the axes before axis, and the rest.
func (b *Builder) Flatten(x string, axis int64) string {
	return b.Op("Flatten", []string{x}, AInt("axis", axis))
}

// Slice takes [starts, ends) with steps along axes.
func (b *Builder) Slice(x string, starts, ends, axes, steps []int64) string {
	in := []string{x, b.Ints(starts...), b.Ints(ends...), b.Ints(axes...)}
	if steps != nil {
		in = append(in, b.Ints(steps...))
	}
	return b.Op("Slice", in)
}

// Pad pads (negative values crop) with zeros; pads lists the begins of
// every axis, then the ends.
func (b *Builder) Pad(x string, pads []int64) string {
	return b.Op("Pad", []string{x, b.Ints(pads...)})
}

// Gather picks entries of x along axis at the int64 indices idx.
func (b *Builder) Gather(x, idx string, axis int64) string {
	return b.Op("Gather", []string{x, idx}, AInt("axis", axis))
}

// ArgMin returns the int64 index of the smallest entry along axis.
func (b *Builder) ArgMin(x string, axis int64, keep bool) string {
	k := int64(0)
	if keep {
		k = 1
	}
	return b.Op("ArgMin", []string{x}, AInt("axis", axis), AInt("keepdims", k))
}

// ReduceMin takes the minimum over axes.
func (b *Builder) ReduceMin(x string, keep bool, axes ...int64) string {
	return b.reduce("ReduceMin", x, axes, keep)
}

// Einsum emits the ONNX Einsum op.
func (b *Builder) Einsum(equation string, xs ...string) string {
	return b.Op("Einsum", xs, AString("equation", equation))
}

// LayerNorm normalises over the axes from axis on, then scales and shifts.
func (b *Builder) LayerNorm(x, scale, bias string, axis int64, eps float64) string {
	return b.Op("LayerNormalization", []string{x, scale, bias}, AInt("axis", axis), AFloat("epsilon", eps))
}

// GroupNorm is GroupNormalization as PyTorch exports it at opset 17:
// Reshape to (N, groups, -1), InstanceNormalization with unit scale and
// zero shift, Reshape back, then the per-channel scale and shift.
func (b *Builder) GroupNorm(x, scale, bias string, groups int64, eps float64) string {
	xi := b.Info(x)
	if xi.Rank() < 3 {
		return b.Fail("graph: GroupNorm needs a known rank >= 3, %s is %v", x, xi)
	}
	one, _ := Floats("", xi.DType, []int64{groups}, repeat(1, groups))
	zero, _ := Floats("", xi.DType, []int64{groups}, repeat(0, groups))
	r := b.Reshape(x, b.Ints(0, groups, -1))
	n := b.Op("InstanceNormalization", []string{r, b.Const(one), b.Const(zero)}, AFloat("epsilon", eps))
	n = b.ReshapeLike(n, x)
	var tail []int64
	for i := 1; i < xi.Rank()-1; i++ {
		tail = append(tail, int64(i))
	}
	return b.Add(b.Mul(n, b.Unsqueeze(scale, tail...)), b.Unsqueeze(bias, tail...))
}

// Gelu is the exact GELU, x·Φ(x), in the elementary ops exporters write.
func (b *Builder) Gelu(x string) string {
	half := b.ScalarLike(x, 0.5)
	return b.Mul(b.Mul(x, half), b.Add(b.ScalarLike(x, 1), b.Erf(b.Div(x, b.ScalarLike(x, 1.4142135623730951)))))
}

func repeat(v float64, n int64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = v
	}
	return s
}
