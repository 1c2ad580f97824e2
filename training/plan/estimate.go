package plan

import (
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/setup"
)

// Estimate gives the sample tensors and the cache bound of the training
// dataset that data of c describes, from the configuration alone, for a
// plan made before the data exists. It mirrors the Spec methods of the
// volumes, images and tokens datasets as setup.Datasets sets them up
// (TestEstimate keeps it equal to them); ok is false for kinds it cannot
// size without the data (synthetic, which needs no files anyway, and
// arrays, whose shapes are the files').
func Estimate(c *config.Config, m *artifacts.Manifest) (spec []data.TensorSpec, cacheBytes int64, ok bool) {
	d := c.Data
	switch d.Kind {
	case config.KindVolumes:
		p := d.Volumes.PatchSize
		return []data.TensorSpec{
			{Name: "volume", DType: data.Float32, Shape: []int{1, p[0], p[1], p[2]}},
			{Name: "index", DType: data.Int64, Shape: []int{4}},
		}, setup.VolumeCacheBytes(c), true
	case config.KindImages:
		s := d.Images.Size
		shape := []int{3, s, s}
		if d.Images.Layout == "NHWC" {
			shape = []int{s, s, 3}
		}
		return []data.TensorSpec{{Name: "image", DType: data.Float32, Shape: shape}, {Name: "label", DType: data.Int64}}, 0, true
	case config.KindTokens:
		tc := setup.TokensConfig(c, m)
		L := []int{tc.SeqLen}
		spec = []data.TensorSpec{
			{Name: "input_ids", DType: data.Int64, Shape: L},
			{Name: "attention_mask", DType: data.Uint8, Shape: L},
			{Name: "loss_mask", DType: data.Uint8, Shape: L},
			{Name: "segment_ids", DType: data.Int64, Shape: L},
		}
		if tc.Noise {
			spec = append(spec, data.TensorSpec{Name: "noisy_ids", DType: data.Int64, Shape: L}, data.TensorSpec{Name: "t", DType: data.Float32, Shape: L})
		}
		return spec, 0, true
	}
	return nil, 0, false
}
