package graph

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/safefile"
)

// OpsetError is a model whose ai.onnx opset ortrain does not read.
type OpsetError struct {
	Have int64
}

func (e *OpsetError) Error() string {
	return fmt.Sprintf("graph: the model imports ai.onnx opset %d; ortrain reads opsets %d to %d (re-export with opset_version=17)", e.Have, MinOpset, MaxOpset)
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *OpsetError) BadInput() bool { return true }

// FromModel converts a ModelProto into a Graph. External data must already
// be loaded (Load does that).
func FromModel(m *onnxpb.ModelProto) (*Graph, error) {
	var opset int64 = -1
	domains := map[string]int64{}
	for _, o := range m.GetOpsetImport() {
		switch o.GetDomain() {
		case "", "ai.onnx":
			opset = o.GetVersion()
		default:
			domains[o.GetDomain()] = o.GetVersion()
		}
	}
	if opset < MinOpset || opset > MaxOpset {
		return nil, &OpsetError{Have: opset}
	}
	gp := m.GetGraph()
	g := New(gp.GetName(), opset)
	g.Domains = domains
	for _, kv := range m.GetMetadataProps() {
		if g.Metadata == nil {
			g.Metadata = map[string]string{}
		}
		g.Metadata[kv.GetKey()] = kv.GetValue()
	}
	for _, t := range gp.GetInitializer() {
		// A code ONNX does not define would be kept as a constant of no
		// known type, and a parameter so marked silently left out of
		// training.
		if dt := t.GetDataType(); dt < 1 || dt > maxDataType {
			return nil, &TensorError{t.GetName(), fmt.Sprintf("data_type %d is not an ONNX element type (ONNX Runtime's are 1 to %d): the file is damaged or was not written by an ONNX exporter; export the model again", dt, maxDataType)}
		}
		if _, err := checkTensor(t); err != nil {
			return nil, err
		}
		g.AddInitializer(t)
	}
	for _, vi := range gp.GetInput() {
		if _, isInit := g.Initializers[vi.GetName()]; isInit {
			continue // IR < 4 style: initializers listed as inputs too
		}
		info, dims := infoOf(vi)
		g.AddInput(vi.GetName(), info)
		g.Dims[vi.GetName()] = dims
	}
	declared := map[string]Info{}
	for _, vi := range append(append([]*onnxpb.ValueInfoProto{}, gp.GetValueInfo()...), gp.GetOutput()...) {
		info, _ := infoOf(vi)
		declared[vi.GetName()] = info
	}
	for _, vi := range gp.GetValueInfo() {
		if _, dims := infoOf(vi); slices.ContainsFunc(dims, func(d string) bool { return d != "" }) {
			g.Dims[vi.GetName()] = dims
		}
	}
	for _, vi := range gp.GetOutput() {
		g.Outputs = append(g.Outputs, vi.GetName())
		_, dims := infoOf(vi)
		g.Dims[vi.GetName()] = dims
	}
	for _, np := range gp.GetNode() {
		if len(np.GetAttribute()) > 0 {
			for _, a := range np.GetAttribute() {
				if a.GetG() != nil || len(a.GetGraphs()) > 0 {
					return nil, &ModelError{Msg: fmt.Sprintf("%s node %q holds a subgraph (attribute %s): ortrain does not train through control flow (If, Loop, Scan); export the model with the branch taken or the loop unrolled", np.GetOpType(), np.GetName(), a.GetName())}
				}
			}
		}
		n := &Node{Op: np.GetOpType(), Domain: np.GetDomain(), Name: np.GetName(), Inputs: np.GetInput(), Outputs: np.GetOutput(), Attrs: np.GetAttribute()}
		if n.Domain == "ai.onnx" {
			n.Domain = ""
		}
		g.AddNode(n)
		// Inference wins where it knows the shape; the file's value_info
		// fills in what it does not.
		for _, o := range n.Outputs {
			if d, ok := declared[o]; ok && !g.Infos[o].Known {
				g.Infos[o] = d
			}
		}
	}
	return g, fromFile(g.Sort())
}

func infoOf(vi *onnxpb.ValueInfoProto) (Info, []string) {
	tt := vi.GetType().GetTensorType()
	info := Info{DType: dtype.DType(tt.GetElemType())}
	if tt.GetShape() == nil {
		return info, nil
	}
	info.Known = true
	info.Shape = []int64{}
	var names []string
	for _, d := range tt.GetShape().GetDim() {
		if v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok {
			info.Shape = append(info.Shape, v.DimValue)
			names = append(names, "")
		} else {
			info.Shape = append(info.Shape, -1)
			names = append(names, d.GetDimParam())
		}
	}
	return info, names
}

// ValueInfo returns the ONNX declaration of a value from its facts, keeping
// symbolic dimension names recorded for it.
func (g *Graph) ValueInfo(name string) *onnxpb.ValueInfoProto {
	info := g.Infos[name]
	tt := &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(info.DType))}
	if info.Known {
		tt.Shape = &onnxpb.TensorShapeProto{}
		sym := g.Dims[name]
		for i, d := range info.Shape {
			dim := &onnxpb.TensorShapeProto_Dimension{}
			switch {
			case d >= 0:
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}
			case i < len(sym) && sym[i] != "":
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: sym[i]}
			}
			tt.Shape.Dim = append(tt.Shape.Dim, dim)
		}
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: tt}}}
}

// ToModel converts the graph into a ModelProto (IR version 8).
func (g *Graph) ToModel() *onnxpb.ModelProto {
	gp := &onnxpb.GraphProto{Name: proto.String(g.Name)}
	for _, name := range g.InitOrder {
		gp.Initializer = append(gp.Initializer, g.Initializers[name])
	}
	for _, in := range g.Inputs {
		gp.Input = append(gp.Input, g.ValueInfo(in))
	}
	for _, out := range g.Outputs {
		gp.Output = append(gp.Output, g.ValueInfo(out))
	}
	outputs := g.OutputSet()
	for _, n := range g.Nodes {
		np := &onnxpb.NodeProto{OpType: proto.String(n.Op), Name: proto.String(n.Name), Input: n.Inputs, Output: n.Outputs, Attribute: n.Attrs}
		if n.Domain != "" {
			np.Domain = proto.String(n.Domain)
		}
		gp.Node = append(gp.Node, np)
		// Intermediate values with named dimensions, which ONNX Runtime's
		// inference would leave unknown (see Dims).
		for _, o := range n.Outputs {
			if _, named := g.Dims[o]; named && o != "" && !outputs[o] {
				gp.ValueInfo = append(gp.ValueInfo, g.ValueInfo(o))
			}
		}
	}
	m := &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("ortrain"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(g.Opset)}},
		Graph:        gp,
	}
	for d, v := range g.Domains {
		m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String(d), Version: proto.Int64(v)})
	}
	return m
}

// Marshal serialises the graph as an ONNX model with all data inline.
func (g *Graph) Marshal() ([]byte, error) {
	return proto.Marshal(g.ToModel())
}

// FileError is a model file ortrain cannot read as an ONNX model: missing,
// empty, truncated, or another kind of file. Path is absolute.
type FileError struct {
	Path, Msg string
	Err       error // the cause, if any (fs.ErrNotExist...)
}

func (e *FileError) Error() string { return fmt.Sprintf("graph: %s %s", e.Path, e.Msg) }

func (e *FileError) Unwrap() error { return e.Err }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *FileError) BadInput() bool { return true }

// maxDataType is the last element type code ONNX Runtime 1.30 knows
// (ONNXTensorElementDataType: INT2, from ONNX 1.20).
const maxDataType = 25

// Load reads an ONNX model file, pulling in external data. External data
// locations must be relative paths inside the model's folder: a model file
// must not make ortrain read arbitrary files. Errors name the file by its
// absolute path.
func Load(path string) (*Graph, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	// Stat before reading: reading a FIFO would block for a writer.
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &FileError{path, "does not exist", err}
	case err != nil:
		return nil, &FileError{path, fmt.Sprintf("cannot be read: %v", err), err}
	case st.IsDir():
		return nil, &FileError{path, "is a folder, not an ONNX model file", nil}
	case !st.Mode().IsRegular():
		return nil, &FileError{path, "is not a regular file", nil}
	}
	b, err := safefile.ReadFile(path)
	if err != nil {
		return nil, &FileError{path, fmt.Sprintf("cannot be read: %v", err), err}
	}
	return load(path, b)
}

// load reads b, the bytes of the model file at path, as Load does.
func load(path string, b []byte) (*Graph, error) {
	if len(b) == 0 {
		return nil, &FileError{path, "is empty (0 bytes), not an ONNX model: did the export or the copy fail?", nil}
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, &FileError{path, fmt.Sprintf("is not an ONNX model (%d bytes; truncated, or another kind of file?): %v", len(b), err), err}
	}
	if m.Graph == nil {
		return nil, &FileError{path, fmt.Sprintf("is not an ONNX model: its %d bytes hold no graph (truncated, or another kind of file?)", len(b)), nil}
	}
	if err := LoadExternal(m, filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	g, err := FromModel(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

// ExternalPathError is an external data location outside the model's folder.
type ExternalPathError struct {
	Tensor, Location string
}

func (e *ExternalPathError) Error() string {
	return fmt.Sprintf("graph: tensor %q keeps its data at %q, outside the model's folder; external data must be a relative path below it", e.Tensor, e.Location)
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *ExternalPathError) BadInput() bool { return true }

// confine resolves a relative location inside dir, refusing absolute paths,
// "..", and symbolic links that lead out of dir.
func confine(dir, tensor, loc string) (string, error) {
	clean := filepath.Clean(filepath.FromSlash(loc))
	if loc == "" || filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) || filepath.VolumeName(clean) != "" {
		return "", &ExternalPathError{tensor, loc}
	}
	full := filepath.Join(dir, clean)
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	realFull, err := filepath.EvalSymlinks(full)
	if errors.Is(err, fs.ErrNotExist) {
		return "", &TensorError{tensor, fmt.Sprintf("its external data file %s (location %q) is missing: copy it next to the model, where the export wrote it", full, loc)}
	}
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(realDir, realFull)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", &ExternalPathError{tensor, loc}
	}
	return realFull, nil
}

// LoadExternal replaces every external-data reference in the model's
// initializers by the bytes it points at, read from files under dir.
func LoadExternal(m *onnxpb.ModelProto, dir string) error {
	files := map[string]*os.File{}
	// Bytes read per file: tensors' ranges may not overlap, so a small
	// model cannot have one large data file read into memory many times.
	read := map[string]int64{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, t := range m.GetGraph().GetInitializer() {
		if t.GetDataLocation() != onnxpb.TensorProto_EXTERNAL {
			continue
		}
		var loc string
		var off, length int64 = 0, -1
		for _, kv := range t.GetExternalData() {
			var err error
			switch kv.GetKey() {
			case "location":
				loc = kv.GetValue()
			case "offset":
				off, err = strconv.ParseInt(kv.GetValue(), 10, 64)
			case "length":
				length, err = strconv.ParseInt(kv.GetValue(), 10, 64)
			}
			if err != nil {
				return fmt.Errorf("graph: tensor %q: bad external_data %s: %w", t.GetName(), kv.GetKey(), err)
			}
		}
		path, err := confine(dir, t.GetName(), loc)
		if err != nil {
			return err
		}
		want, err := checkTensor(t)
		if err != nil {
			return err
		}
		// Stat before opening: opening a FIFO would block for a writer.
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return &TensorError{t.GetName(), fmt.Sprintf("external data %s is not a regular file", path)}
		}
		f := files[path]
		if f == nil {
			if f, err = safefile.Open(path); err != nil {
				return err
			}
			files[path] = f
		}
		if length < 0 {
			length = want
		}
		if length != want {
			return &TensorError{t.GetName(), fmt.Sprintf("external length %d, but its type and shape need %d bytes", length, want)}
		}
		if off < 0 || off > st.Size() || length > st.Size()-off {
			return &TensorError{t.GetName(), fmt.Sprintf("external data at %d+%d runs past the end of %s (%d bytes)", off, length, path, st.Size())}
		}
		if read[path] += length; read[path] > st.Size() {
			return &TensorError{t.GetName(), fmt.Sprintf("the tensors' external data add up to more than the %d bytes of %s: their ranges overlap", st.Size(), path)}
		}
		buf := make([]byte, length)
		if _, err := f.ReadAt(buf, off); err != nil {
			return fmt.Errorf("graph: tensor %q: reading %s at %d: %w", t.GetName(), loc, off, err)
		}
		t.RawData = buf
		t.ExternalData = nil
		t.DataLocation = nil
	}
	return nil
}

// SaveOptions control how Save writes tensors.
type SaveOptions struct {
	// ExternalThreshold moves initializers of at least this many bytes into
	// one data file next to the model (name.onnx.data); 0 keeps all inline.
	// Models over protobuf's 2 GiB limit need it.
	ExternalThreshold int64
}

// Save writes the graph as an ONNX model file.
func (g *Graph) Save(path string, opts SaveOptions) error {
	m := g.ToModel()
	if opts.ExternalThreshold > 0 {
		dataName := filepath.Base(path) + ".data"
		var data []byte
		var inits []*onnxpb.TensorProto
		for _, t := range m.Graph.Initializer {
			raw, err := RawBytes(t)
			if err != nil {
				return err
			}
			if int64(len(raw)) < opts.ExternalThreshold {
				inits = append(inits, t)
				continue
			}
			for len(data)%64 != 0 { // aligned so readers may map it
				data = append(data, 0)
			}
			ext := &onnxpb.TensorProto{Name: t.Name, DataType: t.DataType, Dims: t.Dims, DataLocation: onnxpb.TensorProto_EXTERNAL.Enum()}
			ext.ExternalData = []*onnxpb.StringStringEntryProto{
				{Key: proto.String("location"), Value: proto.String(dataName)},
				{Key: proto.String("offset"), Value: proto.String(strconv.Itoa(len(data)))},
				{Key: proto.String("length"), Value: proto.String(strconv.Itoa(len(raw)))},
			}
			data = append(data, raw...)
			inits = append(inits, ext)
		}
		m.Graph.Initializer = inits
		if len(data) > 0 {
			if err := safefile.WriteBytes(filepath.Join(filepath.Dir(path), dataName), true, data); err != nil {
				return err
			}
		}
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	// Never a truncated model under its final name (an export killed
	// mid-write, a full disk).
	return safefile.WriteBytes(path, true, b)
}

// le is the byte order of ONNX raw data.
var le = binary.LittleEndian
