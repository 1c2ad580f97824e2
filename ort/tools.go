//go:build tools

package ort

// onnxruntime_go is a dependency for its copy of ONNX Runtime's C headers,
// which scripts/ort-headers takes from the module cache at build time; this
// import keeps it in go.mod.
import _ "github.com/yalue/onnxruntime_go"
