package tokens

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/training/data"
)

func mustGPT2(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := GPT2()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestGPT2IdsAreGPT2s(t *testing.T) {
	tok := mustGPT2(t)
	for _, tc := range []struct {
		text string
		ids  []int64
	}{
		{"Hello world", []int64{15496, 995}},
		{"<|endoftext|>", []int64{27, 91, 437, 1659, 5239, 91, 29}}, // text, not the control token
		{" 36-20=<<36-20=16>>16", []int64{4570, 12, 1238, 28, 16791, 2623, 12, 1238, 28, 1433, 4211, 1433}},
	} {
		got := tok.Encode(nil, tc.text)
		if !slices.Equal(got, tc.ids) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.ids)
		}
		if back := tok.Decode(got); back != tc.text {
			t.Errorf("Decode(Encode(%q)) = %q", tc.text, back)
		}
	}
	if got := tok.Decode([]int64{15496, EndOfText, Mask}); got != "Hello<|endoftext|><|mask|>" {
		t.Errorf("special ids decode as %q", got)
	}
}

func TestReadGSM8K(t *testing.T) {
	ex, skipped, err := ReadGSM8K("testdata/gsm8k_small.jsonl", false)
	if err != nil || len(ex) != 4 || skipped != 0 {
		t.Fatalf("%d examples, %d skipped, %v", len(ex), skipped, err)
	}
	if ex[0].Final() != "16" || ex[3].Final() != "36" {
		t.Errorf("final answers %q %q", ex[0].Final(), ex[3].Final())
	}
	if got := ex[0].PlanText(); got != "3*12=36\n36-20=16\n#### 16" {
		t.Errorf("derived plan %q", got)
	}
	if got := ex[2].PlanText(); got != "pages per week, then add Sunday" {
		t.Errorf("given plan %q", got)
	}

	_, _, err = ReadGSM8K("testdata/gsm8k_bad.jsonl", false)
	abs, _ := filepath.Abs("testdata/gsm8k_bad.jsonl")
	var fe *FileError
	if err == nil || err.Error() != abs+`:2: answer has no "####" line with the final answer` || !errors.As(err, &fe) || !fe.BadInput() {
		t.Errorf("bad line: %v; want bad input naming the full path and line", err)
	}
	if _, _, err := ReadGSM8K("testdata/missing.jsonl", false); !errors.As(err, &fe) || !strings.Contains(err.Error(), abs[:len(abs)-len("gsm8k_bad.jsonl")]+"missing.jsonl") {
		t.Errorf("missing file: %v; want bad input naming the full path", err)
	}
	ex, skipped, err = ReadGSM8K("testdata/gsm8k_bad.jsonl", true)
	if err != nil || len(ex) != 2 || skipped != 4 {
		t.Errorf("skipping: %d examples, %d skipped, %v; want 2 and 4", len(ex), skipped, err)
	}
}

func TestBD3LayoutAlignsTheAnswerToABlock(t *testing.T) {
	tok := mustGPT2(t)
	ex := []Example{{Question: "Hello world", Answer: "1+1=<<1+1=2>>2\n#### 2"}}
	ds, err := New(ex, tok, Config{SeqLen: 24, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	s := sampleOf(t, ds, 0, 0)
	ans := tok.Encode(nil, ex[0].Answer) // 15 ids + EndOfText fill [4, 20)
	wantIDs := append(append([]int64{15496, 995, EndOfText, EndOfText}, ans...), EndOfText, EndOfText, EndOfText, EndOfText, EndOfText)
	if !slices.Equal(s.Get("input_ids").I64, wantIDs) {
		t.Errorf("ids %v, want %v", s.Get("input_ids").I64, wantIDs)
	}
	ones := func(n int) []uint8 { return slices.Repeat([]uint8{1}, n) }
	if got, want := s.Get("attention_mask").U8, slices.Concat([]uint8{1, 1, 0, 0}, ones(16), []uint8{0, 0, 0, 0}); !slices.Equal(got, want) {
		t.Errorf("attention mask %v, want %v", got, want)
	}
	if got, want := s.Get("loss_mask").U8, slices.Concat([]uint8{0, 0, 0, 0}, ones(16), []uint8{0, 0, 0, 0}); !slices.Equal(got, want) {
		t.Errorf("loss mask %v, want %v", got, want)
	}
	if got, want := s.Get("segment_ids").I64, slices.Concat([]int64{0, 0, 0, 0}, slices.Repeat([]int64{1}, 20)); !slices.Equal(got, want) {
		t.Errorf("segments %v, want %v", got, want)
	}
	if ds.Truncated() != 0 {
		t.Error("nothing was cut, but Truncated says so")
	}
	if _, err := New(ex, tok, Config{SeqLen: 24, BlockSize: 5}); err == nil {
		t.Error("block size 5 with seq_len 24 accepted")
	}
}

func TestHDPSegments(t *testing.T) {
	tok := mustGPT2(t)
	ex, _, err := ReadGSM8K("testdata/gsm8k_small.jsonl", false)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := New(ex, tok, Config{SeqLen: 512, Segments: []int{128, 128, 256}})
	if err != nil {
		t.Fatal(err)
	}
	s := sampleOf(t, ds, 0, 0)
	ids, seg, loss := s.Get("input_ids").I64, s.Get("segment_ids").I64, s.Get("loss_mask").U8
	for _, part := range []struct {
		lo, hi int
		seg    int64
		text   string
		loss   uint8
	}{
		{0, 128, 0, ex[0].Question, 0},
		{128, 256, 1, ex[0].PlanText() + "<|endoftext|>", 1},
		{256, 512, 2, ex[0].Answer + "<|endoftext|>", 1},
	} {
		n := 0
		for p := part.lo; p < part.hi; p++ {
			if seg[p] != part.seg {
				t.Fatalf("position %d in segment %d, want %d", p, seg[p], part.seg)
			}
			if s.Get("attention_mask").U8[p] == 1 {
				n++
				if loss[p] != part.loss {
					t.Errorf("position %d loss %d, want %d", p, loss[p], part.loss)
				}
			}
		}
		if got := tok.Decode(ids[part.lo : part.lo+n]); got != part.text {
			t.Errorf("segment %d holds %q, want %q", part.seg, got, part.text)
		}
	}
	// A question longer than its segment is cut and counted.
	long := []Example{{Question: strings.Repeat("word ", 200), Answer: "#### 1"}}
	ds, _ = New(long, tok, Config{SeqLen: 512, Segments: []int{128, 128, 256}})
	if ds.Truncated() != 1 {
		t.Errorf("a 200-token question in 128 was not counted as truncated")
	}
}

func TestNoiseMasksOnlyAnswersAtTheDrawnLevel(t *testing.T) {
	tok := mustGPT2(t)
	ex, _, _ := ReadGSM8K("testdata/gsm8k_small.jsonl", false)
	ds, err := New(ex, tok, Config{SeqLen: 128, BlockSize: 16, Noise: true, MinNoise: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	masked, answer := 0, 0
	for i := range ds.Len() {
		for seed := range 20 {
			s := sampleOf(t, ds, i, uint64(seed))
			ids, noisy, loss, tt := s.Get("input_ids").I64, s.Get("noisy_ids").I64, s.Get("loss_mask").U8, s.Get("t").F32
			for p := range ids {
				if noisy[p] == Mask {
					masked++
					if loss[p] == 0 {
						t.Fatalf("prompt or padding position %d masked", p)
					}
				} else if noisy[p] != ids[p] {
					t.Fatalf("position %d changed to %d", p, noisy[p])
				}
				if loss[p] == 1 {
					answer++
				}
				if tt[p] < 0.2 || tt[p] >= 1 || tt[p] != tt[p/16*16] {
					t.Fatalf("t[%d] = %v: not one level per 16-token block in [0.2, 1)", p, tt[p])
				}
			}
		}
	}
	// The expected masked fraction is the mean level, 0.6.
	if f := float64(masked) / float64(answer); f < 0.5 || f > 0.7 {
		t.Errorf("masked %.2f of answer tokens, want about 0.6", f)
	}
}

// sampleOf loads sample i with a fresh buffer and rng seed.
func sampleOf(t *testing.T, ds *Dataset, i int, seed uint64) data.Sample {
	t.Helper()
	l, err := data.New(ds, data.Config{BatchSize: 1, Workers: 1, MaxBytes: 1 << 20, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Resume(data.Cursor{Position: i}); err != nil {
		t.Fatal(err)
	}
	b, err := l.Next()
	if err != nil {
		t.Fatal(err)
	}
	s := make(data.Sample, len(b.Tensors))
	for k, x := range b.Tensors {
		s[k] = data.Tensor{Name: x.Name, DType: x.DType, Shape: x.Shape[1:], F32: slices.Clone(x.F32), I64: slices.Clone(x.I64), U8: slices.Clone(x.U8)}
	}
	return s
}

// FuzzParseGSM8K: any bytes give examples or an error naming the file and
// line, never a panic; every example returned has a question and a "####".
func FuzzParseGSM8K(f *testing.F) {
	for _, seed := range []string{
		`{"question": "q", "answer": "a\n#### 1"}` + "\n",
		`{"question": "q", "answer": "no final"}`,
		"{\"question\": \"q\"}\n\n[1,2]\n{\"question\": 1}",
	} {
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, skip bool) {
		ex, _, err := ParseGSM8K("fuzz.jsonl", bytes.NewReader(b), skip)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.jsonl:") {
				t.Errorf("error does not name the file: %v", err)
			}
			return
		}
		for _, e := range ex {
			if strings.TrimSpace(e.Question) == "" || !strings.Contains(e.Answer, "####") {
				t.Errorf("accepted %+v", e)
			}
		}
	})
}

// TestNoiseRange: with the noise clipped to [0.3, 0.8) (BD3-LM's
// sampling_eps_min/max) every block's level t falls there; an empty or
// inverted range is refused.
func TestNoiseRange(t *testing.T) {
	tok := mustGPT2(t)
	ex := []Example{{Question: "Hello world", Answer: "1+1=<<1+1=2>>2\n#### 2"}}
	ds, err := New(ex, tok, Config{SeqLen: 24, BlockSize: 4, Noise: true, MinNoise: 0.3, MaxNoise: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(20) {
		for _, v := range sampleOf(t, ds, 0, seed).Get("t").F32 {
			if v < 0.3 || v >= 0.8 {
				t.Fatalf("seed %d: t = %g, outside [0.3, 0.8)", seed, v)
			}
		}
	}
	for _, r := range [][2]float64{{0.5, 0.5}, {0.6, 0.2}, {-0.1, 0.5}, {0.2, 1.5}} {
		if _, err := New(ex, tok, Config{SeqLen: 24, BlockSize: 4, Noise: true, MinNoise: r[0], MaxNoise: r[1]}); err == nil {
			t.Errorf("noise range %v accepted", r)
		}
	}
}

// TestDraws: with Draws 3 each example is three samples in a row, the same
// sequence under noise of its own (validation's val_t_samples).
func TestDraws(t *testing.T) {
	tok := mustGPT2(t)
	ex := []Example{
		{Question: "Hello world", Answer: "1+1=<<1+1=2>>2 and then some more words to mask\n#### 2"},
		{Question: "Second", Answer: "2+2=<<2+2=4>>4\n#### 4"},
	}
	ds, err := New(ex, tok, Config{SeqLen: 32, BlockSize: 4, Noise: true, Draws: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 6 || ds.Examples() != 2 {
		t.Fatalf("Len %d, Examples %d; want 6 samples of 2 examples", ds.Len(), ds.Examples())
	}
	first := sampleOf(t, ds, 0, 1)
	for i := 1; i < 3; i++ {
		s := sampleOf(t, ds, i, 1)
		if !slices.Equal(s.Get("input_ids").I64, first.Get("input_ids").I64) {
			t.Errorf("sample %d is not example 0", i)
		}
		if slices.Equal(s.Get("t").F32, first.Get("t").F32) {
			t.Errorf("sample %d drew the same t as sample 0", i)
		}
	}
	if slices.Equal(sampleOf(t, ds, 3, 1).Get("input_ids").I64, first.Get("input_ids").I64) {
		t.Error("sample 3 is still example 0")
	}
}

func TestFinalAnswer(t *testing.T) {
	for _, tc := range []struct {
		text, want string
		ok         bool
	}{
		{"She has 3 + 4 = <<3+4=7>>7 apples.\n#### 7", "7", true},
		{"#### 1,234.\nmore text", "1234", true},
		{"#### $18", "18", true},
		{"first #### 2\nthen #### -5", "-5", true},
		{"no final line", "", false},
		{"####   \n", "", false},
	} {
		got, ok := FinalAnswer(tc.text)
		if got != tc.want || ok != tc.ok {
			t.Errorf("FinalAnswer(%q) = %q, %v; want %q, %v", tc.text, got, ok, tc.want, tc.ok)
		}
	}
	e := Example{Answer: "Half of 48 is <<48/2=24>>24.\n#### 24"}
	if got, _ := FinalAnswer(e.Answer); got != e.Final() {
		t.Errorf("FinalAnswer of a GSM8K answer %q, Final %q", got, e.Final())
	}
}
