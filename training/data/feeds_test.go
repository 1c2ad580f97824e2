package data

import (
	"strings"
	"testing"
)

// TestFeedsSource: an input takes the tensor of its own name; a built-in
// loss's target the loaders' label; an input named in Feeds the tensor
// named there; an input nothing feeds is an error listing what the loader
// gives and the key that maps it.
func TestFeedsSource(t *testing.T) {
	b := &Batch{Tensors: []*Tensor{{Name: "image"}, {Name: "label"}}}
	f := Feeds{"images": "image"}
	for input, want := range map[string]string{"image": "image", "target": "label", "images": "image"} {
		got, k, err := f.Source(input, b)
		if err != nil || got.Name != want || b.Tensors[k] != got {
			t.Errorf("%s: %v (%d), %v; want %s", input, got, k, err, want)
		}
	}
	if _, _, err := (Feeds{}).Source("pixels", b); err == nil || !strings.Contains(err.Error(), "image, label") || !strings.Contains(err.Error(), "data.feeds") {
		t.Errorf("an input nothing feeds: %v", err)
	}
	if _, _, err := (Feeds{"images": "img"}).Source("images", b); err == nil || !strings.Contains(err.Error(), `"img"`) {
		t.Errorf("a feed naming a missing tensor: %v", err)
	}
}
