package logging

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TensorBoard writes scalars to a TensorBoard event file: a TFRecord
// stream of tensorflow.Event protobufs. Only the fields scalars need are
// written: Event{wall_time = 1 (double), step = 2 (int64), file_version = 3
// (string), summary = 5}, Summary{value = 1 (repeated)},
// Summary.Value{tag = 1 (string), simple_value = 2 (float)}.
type TensorBoard struct {
	path string
	f    *os.File
	w    *bufio.Writer
	now  func() time.Time
}

// NewTensorBoard creates events.out.tfevents.<unix time>.<host> in dir
// (never replacing a file) and writes the file_version record TensorBoard
// expects first.
func NewTensorBoard(dir string) (*TensorBoard, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	now := time.Now()
	var f *os.File
	var path string
	for i := int64(0); ; i++ {
		path = filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%d.%s", now.Unix()+i, host))
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !os.IsExist(err) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	tb := &TensorBoard{path: path, f: f, w: bufio.NewWriter(f), now: time.Now}
	ev := appendEventHeader(nil, tb.now(), 0)
	ev = protowire.AppendTag(ev, 3, protowire.BytesType)
	ev = protowire.AppendString(ev, "brain.Event:2")
	tb.writeRecord(ev)
	return tb, tb.w.Flush()
}

// Path is the event file's path.
func (tb *TensorBoard) Path() string { return tb.path }

// Restart marks a resume from a checkpoint at step: an Event{step =
// step+1, session_log = 7 {status = 1 (START)}}, on which TensorBoard
// drops the points at step+1 and after that the interrupted run had
// already written, instead of drawing them twice.
func (tb *TensorBoard) Restart(step int64) error {
	ev := appendEventHeader(nil, tb.now(), step+1)
	var sl []byte
	sl = protowire.AppendTag(sl, 1, protowire.VarintType)
	sl = protowire.AppendVarint(sl, 1) // SessionLog.START
	ev = protowire.AppendTag(ev, 7, protowire.BytesType)
	ev = protowire.AppendBytes(ev, sl)
	tb.writeRecord(ev)
	return tb.w.Flush()
}

func appendEventHeader(b []byte, t time.Time, step int64) []byte {
	b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(float64(t.UnixNano())/1e9))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(step))
}

// Log writes one Event holding every metric as a scalar summary value and
// flushes it, so TensorBoard sees it at once.
func (tb *TensorBoard) Log(step int64, metrics map[string]float64) error {
	var summary []byte
	for _, k := range sortedKeys(metrics) {
		var v []byte
		v = protowire.AppendTag(v, 1, protowire.BytesType)
		v = protowire.AppendString(v, k)
		v = protowire.AppendTag(v, 2, protowire.Fixed32Type)
		v = protowire.AppendFixed32(v, math.Float32bits(float32(metrics[k])))
		summary = protowire.AppendTag(summary, 1, protowire.BytesType)
		summary = protowire.AppendBytes(summary, v)
	}
	ev := appendEventHeader(nil, tb.now(), step)
	ev = protowire.AppendTag(ev, 5, protowire.BytesType)
	ev = protowire.AppendBytes(ev, summary)
	tb.writeRecord(ev)
	return tb.w.Flush()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's checksum: CRC-32C rotated right by 15 bits plus a
// constant, so a CRC over data that holds CRCs stays well distributed.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// writeRecord frames data as a TFRecord: length (uint64 LE), masked CRC of
// the length, data, masked CRC of the data.
func (tb *TensorBoard) writeRecord(data []byte) {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
	tb.w.Write(hdr[:])
	tb.w.Write(data)
	var foot [4]byte
	binary.LittleEndian.PutUint32(foot[:], maskedCRC(data))
	tb.w.Write(foot[:])
}

// Close flushes and closes the file.
func (tb *TensorBoard) Close() error {
	err := tb.w.Flush()
	if cerr := tb.f.Close(); err == nil {
		err = cerr
	}
	return err
}
