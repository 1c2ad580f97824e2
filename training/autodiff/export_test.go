package autodiff

// SetMaxGatherIndices sets the bound on convWeightGradGather's index table
// (0 turns the gathered weight gradient off) and returns the old bound.
func SetMaxGatherIndices(n int64) int64 {
	old := maxGatherIndices
	maxGatherIndices = n
	return old
}

// SetMaxGatherColumns sets the bound on the windows convWeightGradGather
// gathers per sample (0 sends every window with more than one offset to
// convWeightGradSlabs or one GEMM per offset) and returns the old bound.
func SetMaxGatherColumns(n int64) int64 {
	old := maxGatherColumns
	maxGatherColumns = n
	return old
}

// SetMaxGatherSlabs sets how many offsets' windows convWeightGradSlabs
// gathers at once and returns the old bound.
func SetMaxGatherSlabs(n int64) int64 {
	old := maxGatherSlabs
	maxGatherSlabs = n
	return old
}

// SetSpreadZeros turns insertZeros' ConvTranspose on or off and returns
// the old setting.
func SetSpreadZeros(on bool) bool {
	old := spreadZeros
	spreadZeros = on
	return old
}

// SetMaxBatchedShare sets convWeightGradBatched's bound (a large one turns
// the batched weight gradient off) and returns the old one.
func SetMaxBatchedShare(n int64) int64 {
	old := maxBatchedShare
	maxBatchedShare = n
	return old
}
