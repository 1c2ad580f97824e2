package graph

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/safefile"
)

// StructureHash is the hex SHA-256 of the ONNX model file at path with
// its initializers' values, where they are stored, and the producer's
// notes left out: what it computes, not the numbers it starts from. A
// resume records the run's and refuses a model.onnx that has become
// another graph, while a re-export of the same model with other initial
// weights (which a resume replaces with the checkpoint's) still matches.
func StructureHash(path string) (string, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	b, err := safefile.ReadFile(path)
	if err != nil {
		return "", &FileError{path, fmt.Sprintf("cannot be read: %v", err), err}
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(b, m); err != nil || m.Graph == nil {
		return "", &FileError{path, fmt.Sprintf("is not an ONNX model (%d bytes)", len(b)), err}
	}
	m.ProducerName, m.ProducerVersion, m.DocString, m.ModelVersion = nil, nil, nil, nil
	for _, t := range m.Graph.Initializer {
		t.RawData, t.FloatData, t.DoubleData, t.Int32Data, t.Int64Data, t.Uint64Data, t.StringData = nil, nil, nil, nil, nil, nil, nil
		t.DataLocation, t.ExternalData, t.DocString = nil, nil, nil
	}
	canon, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}
