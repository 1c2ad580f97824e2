package telemetry

import (
	"math"
	"sync/atomic"
	"testing"
	"time"
)

// TestNilSampler checks that a missing GPU costs the caller nothing.
func TestNilSampler(t *testing.T) {
	var s *Sampler
	if _, ok := s.Latest(); ok {
		t.Error("nil sampler has a sample")
	}
	if _, ok := s.Mean(); ok {
		t.Error("nil sampler has a mean")
	}
	if s.Metrics() != nil {
		t.Error("nil sampler has metrics")
	}
	s.Stop()
}

// TestSamplerMean checks the running mean, skipping fields a GPU does not
// report, with a reading function standing in for NVML.
func TestSamplerMean(t *testing.T) {
	vals := []float64{10, 20, 60}
	var calls atomic.Int64
	read := func() (Sample, error) {
		x := emptySample(time.Now())
		x.UtilPct = vals[min(int(calls.Load()), len(vals)-1)]
		x.MemUsed, x.MemTotal = 2<<30, 80<<30
		calls.Add(1)
		return x, nil
	}
	s := startSampler(read, time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s.Stop()
	m, ok := s.Mean()
	if !ok {
		t.Fatal("no mean")
	}
	n := float64(calls.Load())
	want := (10 + 20 + 60*(n-2)) / n
	if math.Abs(m.UtilPct-want) > 1e-9 || !math.IsNaN(m.PowerW) {
		t.Errorf("mean util %v (want %v after %v samples), power %v (want NaN)", m.UtilPct, want, n, m.PowerW)
	}
	got := s.Metrics()
	if got["gpu/mem_used_gib"] != 2 || got["gpu/mem_total_gib"] != 80 {
		t.Errorf("metrics %v", got)
	}
	if _, has := got["gpu/power_w"]; has {
		t.Error("unreported power logged")
	}
}

// TestNVMLIndex checks the CUDA ordinal → NVML index mapping.
func TestNVMLIndex(t *testing.T) {
	for _, tc := range []struct {
		ordinal int
		visible string
		want    int
	}{
		{0, "", 0}, {1, "", 1}, {0, "3,1", 3}, {1, "3, 1", 1}, {0, "GPU-8f2a", 0}, {5, "2", 5},
	} {
		if got := nvmlIndex(tc.ordinal, tc.visible); got != tc.want {
			t.Errorf("nvmlIndex(%d, %q) = %d, want %d", tc.ordinal, tc.visible, got, tc.want)
		}
	}
}

// TestDevices checks that listing GPUs works with or without NVML; on a
// GPU machine it also samples the first one.
func TestDevices(t *testing.T) {
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("devices: %+v", devs)
	s := Start(0, 100*time.Millisecond)
	defer s.Stop()
	if len(devs) == 0 {
		if s != nil {
			t.Error("a sampler started without a GPU")
		}
		return
	}
	if devs[0].Name == "" || devs[0].MemoryTotal == 0 || devs[0].Driver == "" {
		t.Errorf("device 0 = %+v", devs[0])
	}
	if s == nil {
		t.Fatal("no sampler on a GPU machine")
	}
	x, ok := s.Latest()
	if !ok || !(x.MemTotal > 0) {
		t.Errorf("sample %+v", x)
	}
	t.Logf("sample: %+v metrics: %v", x, s.Metrics())
}
