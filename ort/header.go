package ort

// The ONNX Runtime C headers are taken at build time from the onnxruntime_go
// module (scripts/setup runs this), so no copy of them is committed.
//go:generate ../scripts/ort-headers
