package autodiff

// SetMaxGatherIndices sets the bound on convWeightGradGather's index table
// (0 turns the gathered weight gradient off) and returns the old bound.
func SetMaxGatherIndices(n int64) int64 {
	old := maxGatherIndices
	maxGatherIndices = n
	return old
}
