// Package telemetry samples GPU state through NVML (libnvidia-ml, loaded at
// run time) in a background goroutine: utilisation, memory, power and SM
// clock. Without a GPU or the library, Start returns a nil *Sampler whose
// methods do nothing, so the trainer needs no special case.
package telemetry

import (
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var errNoNVML = errors.New("libnvidia-ml.so.1 not found (no NVIDIA driver)")

// Sample is one reading of a GPU. Values a GPU does not report are NaN.
type Sample struct {
	Time        time.Time
	UtilPct     float64 // % of time a kernel ran
	MemUtilPct  float64 // % of time device memory was read or written
	MemUsed     float64 // bytes
	MemTotal    float64 // bytes
	PowerW      float64
	PowerLimitW float64
	SMClockMHz  float64
}

func emptySample(t time.Time) Sample {
	n := math.NaN()
	return Sample{Time: t, UtilPct: n, MemUtilPct: n, MemUsed: n, MemTotal: n, PowerW: n, PowerLimitW: n, SMClockMHz: n}
}

// Sampler reads one GPU at a fixed interval. The latest sample and the
// running mean are published through atomic pointers, so reading them
// never waits for NVML.
type Sampler struct {
	latest atomic.Pointer[Sample]
	mean   atomic.Pointer[Sample]
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// Start samples the GPU with CUDA ordinal device every interval (at least
// 100 ms). It maps the ordinal through a numeric CUDA_VISIBLE_DEVICES. It
// returns nil when NVML or the device is unavailable: telemetry is optional
// and never stops a run.
func Start(device int, interval time.Duration) *Sampler {
	if nvmlReady() != nil {
		return nil
	}
	idx := nvmlIndex(device, os.Getenv("CUDA_VISIBLE_DEVICES"))
	d, err := nvmlDeviceAt(idx)
	if err != nil {
		return nil
	}
	if _, err := d.sample(); err != nil {
		return nil
	}
	return startSampler(d.sample, max(interval, 100*time.Millisecond))
}

// DeviceFor returns the GPU with CUDA ordinal device (through a numeric
// CUDA_VISIBLE_DEVICES); ok is false without NVML or that device.
func DeviceFor(device int) (d Device, ok bool) {
	all, err := Devices()
	if err != nil {
		return d, false
	}
	idx := nvmlIndex(device, os.Getenv("CUDA_VISIBLE_DEVICES"))
	for _, d := range all {
		if d.Index == idx {
			return d, true
		}
	}
	return d, false
}

// nvmlIndex maps a CUDA ordinal to an NVML index when CUDA_VISIBLE_DEVICES
// lists indices; with UUIDs or unset it assumes the orders agree.
func nvmlIndex(ordinal int, visible string) int {
	if visible == "" {
		return ordinal
	}
	parts := strings.Split(visible, ",")
	if ordinal < len(parts) {
		if i, err := strconv.Atoi(strings.TrimSpace(parts[ordinal])); err == nil {
			return i
		}
	}
	return ordinal
}

// startSampler runs read in a goroutine until Stop.
func startSampler(read func() (Sample, error), interval time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		var sum Sample
		var counts [7]float64
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if x, err := read(); err == nil {
				s.latest.Store(&x)
				m := accumulate(&sum, &counts, x)
				s.mean.Store(&m)
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// accumulate adds x to the per-field sums (skipping NaN) and returns the
// means so far.
func accumulate(sum *Sample, counts *[7]float64, x Sample) Sample {
	fields := func(s *Sample) [7]*float64 {
		return [7]*float64{&s.UtilPct, &s.MemUtilPct, &s.MemUsed, &s.MemTotal, &s.PowerW, &s.PowerLimitW, &s.SMClockMHz}
	}
	m := emptySample(x.Time)
	fs, fx, fm := fields(sum), fields(&x), fields(&m)
	for i := range fs {
		if !math.IsNaN(*fx[i]) {
			*fs[i] += *fx[i]
			counts[i]++
		}
		if counts[i] > 0 {
			*fm[i] = *fs[i] / counts[i]
		}
	}
	return m
}

// Latest is the newest sample; false before the first or on a nil Sampler.
func (s *Sampler) Latest() (Sample, bool) {
	if s == nil {
		return Sample{}, false
	}
	p := s.latest.Load()
	if p == nil {
		return Sample{}, false
	}
	return *p, true
}

// Mean is the mean of all samples so far, field by field.
func (s *Sampler) Mean() (Sample, bool) {
	if s == nil {
		return Sample{}, false
	}
	p := s.mean.Load()
	if p == nil {
		return Sample{}, false
	}
	return *p, true
}

// Metrics gives the latest sample as loggable scalars: gpu/util_pct,
// gpu/mem_util_pct, gpu/mem_used_gib, gpu/mem_total_gib, gpu/power_w,
// gpu/power_limit_w, gpu/sm_clock_mhz (those reported). A nil Sampler
// gives nil.
func (s *Sampler) Metrics() map[string]float64 {
	x, ok := s.Latest()
	if !ok {
		return nil
	}
	m := map[string]float64{}
	add := func(k string, v float64) {
		if !math.IsNaN(v) {
			m[k] = v
		}
	}
	add("gpu/util_pct", x.UtilPct)
	add("gpu/mem_util_pct", x.MemUtilPct)
	add("gpu/mem_used_gib", x.MemUsed/(1<<30))
	add("gpu/mem_total_gib", x.MemTotal/(1<<30))
	add("gpu/power_w", x.PowerW)
	add("gpu/power_limit_w", x.PowerLimitW)
	add("gpu/sm_clock_mhz", x.SMClockMHz)
	return m
}

// Stop ends sampling and waits for the goroutine; safe on nil and twice.
func (s *Sampler) Stop() {
	if s == nil {
		return
	}
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

// Device describes a GPU for `ortrain doctor`.
type Device struct {
	Index       int // NVML index
	Name        string
	MemoryTotal uint64 // bytes
	Driver      string // NVIDIA driver version
}

// Devices lists the GPUs NVML sees. Without NVML it returns no devices and
// no error; an error means NVML is present but failing.
func Devices() ([]Device, error) {
	if err := nvmlReady(); errors.Is(err, errNoNVML) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	n, err := nvmlCount()
	if err != nil {
		return nil, err
	}
	driver := nvmlDriver()
	var out []Device
	for i := 0; i < n; i++ {
		d, err := nvmlDeviceAt(i)
		if err != nil {
			return out, err
		}
		total, _, _ := d.memory()
		out = append(out, Device{Index: i, Name: d.name(), MemoryTotal: total, Driver: driver})
	}
	return out, nil
}
