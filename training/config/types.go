package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes written in TOML either as an integer or as a
// string with a unit ("512MiB", "8GiB", "1.5GB"). Binary units (KiB, MiB,
// GiB, TiB) are powers of 1024, decimal ones (KB, MB, GB, TB) powers of 1000.
type ByteSize int64

// UnmarshalTOML implements toml.Unmarshaler.
func (b *ByteSize) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("byte size %d is negative", x)
		}
		*b = ByteSize(x)
		return nil
	case string:
		n, err := ParseByteSize(x)
		if err != nil {
			return err
		}
		*b = n
		return nil
	}
	return fmt.Errorf("byte size must be an integer or a string like \"8GiB\", not %s", valueWords(v))
}

// MarshalTOML implements toml.Marshaler; sizes are written as plain integers
// so the resolved config is exact.
func (b ByteSize) MarshalTOML() ([]byte, error) {
	return []byte(strconv.FormatInt(int64(b), 10)), nil
}

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	// Longest suffixes first so "GiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseByteSize reads a size such as "8GiB", "512 MiB", "1.5GB" or "1024".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	// ≥, not >: float64(MaxInt64) is 2⁶³, which int64 cannot hold ("8388608TiB"
	// came back negative).
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || f*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a byte size (want e.g. 1048576, \"512MiB\", \"8GiB\")", s)
	}
	return ByteSize(math.Round(f * mult)), nil
}

// Interval is Lightning's val_check_interval: a float is a fraction of an
// epoch (0.25 validates four times per epoch), an integer a number of
// optimizer steps. TOML keeps 1 and 1.0 apart, so the spelling decides.
type Interval struct {
	Fraction float64 // of an epoch, in (0, 1]; used when Steps is 0
	Steps    int64   // optimizer steps between validations; 0 when Fraction is used
}

// UnmarshalTOML implements toml.Unmarshaler.
func (iv *Interval) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x <= 0 {
			return fmt.Errorf("an integer interval counts steps and must be ≥ 1, not %d", x)
		}
		*iv = Interval{Steps: x}
		return nil
	case float64:
		if !(x > 0 && x <= 1) {
			return fmt.Errorf("a float interval is a fraction of an epoch in (0, 1], not %g (write an integer for a number of steps)", x)
		}
		*iv = Interval{Fraction: x}
		return nil
	}
	return fmt.Errorf("interval must be a float fraction of an epoch or an integer number of steps, not %s", valueWords(v))
}

// MarshalTOML implements toml.Marshaler, keeping the float/int distinction.
func (iv Interval) MarshalTOML() ([]byte, error) {
	if iv.Steps > 0 {
		return []byte(strconv.FormatInt(iv.Steps, 10)), nil
	}
	s := strconv.FormatFloat(iv.Fraction, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return []byte(s), nil
}

// String formats the interval the way it is written in TOML.
func (iv Interval) String() string {
	b, _ := iv.MarshalTOML()
	return string(b)
}

// StepsIn converts the interval to optimizer steps given the number of
// optimizer steps in an epoch (0 when unknown); it is never below 1.
func (iv Interval) StepsIn(epochSteps int64) int64 {
	if iv.Steps > 0 {
		return iv.Steps
	}
	n := int64(math.Round(iv.Fraction * float64(epochSteps)))
	if n < 1 {
		n = 1
	}
	return n
}

// Precision names the numeric precision of training with Lightning's
// spellings: "32" (strict fp32), "tf32" (fp32 with TF32 tensor cores),
// "bf16-mixed" and "16-mixed". Lightning's short forms 32, "32-true", 16,
// "16", "bf16" are accepted and normalised.
type Precision string

// Precisions known to ortrain, in their normal spelling.
const (
	FP32      Precision = "32"
	TF32      Precision = "tf32"
	BF16Mixed Precision = "bf16-mixed"
	FP16Mixed Precision = "16-mixed"
)

// UnmarshalTOML implements toml.Unmarshaler.
func (p *Precision) UnmarshalTOML(v any) error {
	var s string
	switch x := v.(type) {
	case int64:
		s = strconv.FormatInt(x, 10)
	case string:
		s = x
	default:
		return fmt.Errorf("precision must be a string like \"bf16-mixed\", not %s", valueWords(v))
	}
	q, err := ParsePrecision(s)
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// ParsePrecision normalises a Lightning precision spelling.
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "32", "32-true":
		return FP32, nil
	case "tf32":
		return TF32, nil
	case "bf16-mixed", "bf16":
		return BF16Mixed, nil
	case "16-mixed", "16":
		return FP16Mixed, nil
	}
	return "", fmt.Errorf("precision %q is not one of \"32\", \"tf32\", \"bf16-mixed\", \"16-mixed\"", s)
}
