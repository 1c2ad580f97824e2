package graph

// onnxOps are the operators of ONNX's default domain (ai.onnx), every
// opset to 23, deprecated and experimental ones included: an op outside
// them in that domain is no ONNX operator (a custom op exported without
// its domain, a typo), which ONNX Runtime cannot run.
var onnxOps = func() map[string]bool {
	m := map[string]bool{}
	for _, op := range []string{
		"Abs", "Acos", "Acosh", "Add", "Affine", "AffineGrid", "And", "ArgMax", "ArgMin", "ArrayFeatureExtractor", "Asin", "Asinh", "Atan", "Atanh", "Attention", "AveragePool",
		"BatchNormalization", "Bernoulli", "BitCast", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "BlackmanWindow",
		"Cast", "CastLike", "Ceil", "Celu", "CenterCropPad", "Clip", "Col2Im", "Compress", "Concat", "ConcatFromSequence", "Constant", "ConstantFill", "ConstantOfShape",
		"Conv", "ConvInteger", "ConvTranspose", "Cos", "Cosh", "Crop", "CumProd", "CumSum",
		"DFT", "DeformConv", "DepthToSpace", "DequantizeLinear", "Det", "Div", "Dropout", "DynamicQuantizeLinear", "DynamicSlice",
		"Einsum", "Elu", "Equal", "Erf", "Exp", "Expand", "EyeLike",
		"Flatten", "Floor",
		"GRU", "GRUUnit", "Gather", "GatherElements", "GatherND", "Gelu", "Gemm", "GivenTensorFill", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "GridSample", "GroupNormalization",
		"HammingWindow", "HannWindow", "HardSigmoid", "HardSwish", "Hardmax",
		"Identity", "If", "ImageDecoder", "ImageScaler", "InstanceNormalization", "IsInf", "IsNaN",
		"LRN", "LSTM", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "Loop", "LpNormalization", "LpPool",
		"MatMul", "MatMulInteger", "Max", "MaxPool", "MaxRoiPool", "MaxUnpool", "Mean", "MeanVarianceNormalization", "MelWeightMatrix", "Min", "Mish", "Mod", "Mul", "Multinomial",
		"Neg", "NegativeLogLikelihoodLoss", "NonMaxSuppression", "NonZero", "Not",
		"OneHot", "Optional", "OptionalGetElement", "OptionalHasElement", "Or",
		"PRelu", "Pad", "ParametricSoftplus", "Pow",
		"QLinearConv", "QLinearMatMul", "QuantizeLinear",
		"RMSNormalization", "RNN", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Range", "Reciprocal",
		"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
		"RegexFullMatch", "Relu", "Reshape", "Resize", "ReverseSequence", "RoiAlign", "RotaryEmbedding", "Round",
		"STFT", "Scale", "ScaledTanh", "Scan", "Scatter", "ScatterElements", "ScatterND", "Selu",
		"SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap",
		"Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax", "SoftmaxCrossEntropyLoss", "Softplus", "Softsign",
		"SpaceToDepth", "Split", "SplitToSequence", "Sqrt", "Squeeze", "StringConcat", "StringNormalizer", "StringSplit", "Sub", "Sum", "Swish",
		"Tan", "Tanh", "TensorScatter", "TfIdfVectorizer", "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu",
		"Unique", "Unsqueeze", "Upsample",
		"Where", "Xor",
	} {
		m[op] = true
	}
	return m
}()

// UnknownOp returns the first node of g in ONNX's default domain whose
// operator ONNX does not have, or nil. Ops ortrain itself infers (its
// training-only forms) count as known.
func (g *Graph) UnknownOp() *Node {
	for _, n := range g.Nodes {
		if n.Domain != "" && n.Domain != "ai.onnx" {
			continue
		}
		if _, inferred := inferRules[n.Op]; !onnxOps[n.Op] && !inferred {
			return n
		}
	}
	return nil
}
