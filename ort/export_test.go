package ort

// RawBytes exposes a host value's bytes to the external tests.
func RawBytes(v *Value) []byte { return v.hostBytes() }
