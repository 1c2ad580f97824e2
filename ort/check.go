package ort

import "fmt"

// CheckDevice creates a session on d, moves a tensor to the device and back
// through it, and compares: the smallest proof that training can run there.
// The error says which step failed.
func CheckDevice(d Device, opts Options) error {
	opts.Device = d
	s, err := NewSessionFromBytes(identityModel(Float32), opts)
	if err != nil {
		return fmt.Errorf("creating a %v session: %w", d, err)
	}
	defer s.Close()
	want := []float32{1, -2, 3.5, 1e-3}
	host, err := NewTensor([]int64{4}, want)
	if err != nil {
		return err
	}
	defer host.Close()
	dev, err := s.Upload(host)
	if err != nil {
		return fmt.Errorf("copying to %v: %w", d, err)
	}
	defer dev.Close()
	if dev.Location() != d {
		return fmt.Errorf("a value uploaded to %v landed on %v", d, dev.Location())
	}
	back, err := s.Download(dev)
	if err != nil {
		return fmt.Errorf("copying from %v: %w", d, err)
	}
	defer back.Close()
	for i, x := range Data[float32](back) {
		if x != want[i] {
			return fmt.Errorf("round trip through %v changed element %d: %g, want %g", d, i, x, want[i])
		}
	}
	return nil
}
