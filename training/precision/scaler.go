package precision

import "math"

// Defaults of dynamic loss scaling, as torch.amp.GradScaler's.
const (
	DefaultInitScale      = 65536 // 2^16
	DefaultGrowthInterval = 2000
	growthFactor          = 2
	backoffFactor         = 0.5
)

// MinScale is the floor of dynamic loss scaling, float16's smallest
// subnormal (2^-24): below it the scaled loss itself rounds to zero in
// float16, so gradients that still overflow are not finite at any scale
// and halving further cannot cure them.
const MinScale = 0x1p-24

// MaxScale is the largest loss scale: the scale is fed to the graphs as a
// float32.
const MaxScale = math.MaxFloat32

// LossScaler is dynamic loss scaling for float16 training: the loss is
// multiplied by Scale before the backward pass so that small gradients
// survive float16, and the optimizer divides it out. A step whose
// gradients overflow is skipped and the scale halved; after
// GrowthInterval clean steps in a row it doubles. Its state goes into
// checkpoints, so a resumed run scales exactly as an unbroken one.
type LossScaler struct {
	Scale float64 `json:"scale"`
	Clean int64   `json:"clean"` // clean steps since the scale last changed
	// GrowthInterval is the clean steps before the scale doubles.
	GrowthInterval int64 `json:"-"`
	// Skipped counts the steps skipped for overflow.
	Skipped int64 `json:"skipped"`
}

// NewLossScaler starts at scale init (DefaultInitScale when 0), doubling
// after interval clean steps (DefaultGrowthInterval when 0).
func NewLossScaler(init float64, interval int64) *LossScaler {
	if init == 0 {
		init = DefaultInitScale
	}
	if interval == 0 {
		interval = DefaultGrowthInterval
	}
	return &LossScaler{Scale: init, GrowthInterval: interval}
}

// Update records a step's outcome: finite says whether its gradients were
// all finite. It returns whether the step is applied.
func (s *LossScaler) Update(finite bool) bool {
	if !finite {
		s.Scale *= backoffFactor
		s.Clean = 0
		s.Skipped++
		return false
	}
	s.Clean++
	if s.Clean >= s.GrowthInterval {
		if s.Scale*growthFactor <= MaxScale { // a float32 infinity would overflow every step
			s.Scale *= growthFactor
		}
		s.Clean = 0
	}
	return true
}

// AtFloor reports whether backing off has taken the scale below MinScale:
// overflows there are not the scale's doing.
func (s *LossScaler) AtFloor() bool { return s.Scale < MinScale }
