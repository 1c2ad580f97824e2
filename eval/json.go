package eval

import (
	"encoding/json"
	"math"
)

// jsonFloat writes a metric that JSON's numbers cannot hold as a string:
// the PSNR of a perfect reconstruction is +Inf ("inf"); NaN is "nan".
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	switch {
	case math.IsInf(x, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(x, -1):
		return []byte(`"-inf"`), nil
	case math.IsNaN(x):
		return []byte(`"nan"`), nil
	}
	return json.Marshal(x)
}

// MarshalJSON writes the metrics with a perfect PSNR as "inf".
func (v VolumeMetrics) MarshalJSON() ([]byte, error) {
	type plain VolumeMetrics // its fields, not this method
	return json.Marshal(struct {
		plain
		PSNR jsonFloat `json:"psnr"` // hides plain's
	}{plain(v), jsonFloat(v.PSNR)})
}

// MarshalJSON writes the result with non-finite means as strings.
func (r CheckpointResult) MarshalJSON() ([]byte, error) {
	type plain CheckpointResult
	mean := make(map[string]jsonFloat, len(r.Mean))
	for k, x := range r.Mean {
		mean[k] = jsonFloat(x)
	}
	return json.Marshal(struct {
		plain
		Mean map[string]jsonFloat `json:"mean"`
	}{plain(r), mean})
}
