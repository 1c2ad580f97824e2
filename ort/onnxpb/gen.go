// Package onnxpb holds the ONNX protobuf types (ModelProto, GraphProto, ...)
// generated from onnx.proto. Regenerate with `go generate ./ort/onnxpb`,
// which needs Debian's protobuf-compiler and libonnx-dev and protoc-gen-go
// (`go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12`).
package onnxpb

//go:generate protoc -I/usr/include/onnx --go_out=. --go_opt=paths=source_relative --go_opt=Monnx.proto=github.com/ortrain/ortrain/ort/onnxpb /usr/include/onnx/onnx.proto
