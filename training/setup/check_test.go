package setup

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
)

// shapes is a dataset known only by its sample specs (CheckData reads no
// sample), with class folders when classes is set.
type shapes struct {
	spec    []data.TensorSpec
	classes []string
}

func (s shapes) Len() int                                { return 1 }
func (s shapes) Spec() []data.TensorSpec                 { return s.spec }
func (s shapes) Load(int, *rand.Rand, data.Sample) error { return errors.New("not loaded") }
func (s shapes) ClassNames() []string                    { return s.classes }
func (s shapes) with(c []string) shapes                  { s.classes = c; return s }
func spec(name string, dt data.DType, dims ...int) data.TensorSpec {
	return data.TensorSpec{Name: name, DType: dt, Shape: dims}
}

// TestCheckData: a loader that does not fit the model is a config error
// naming the key to change, before a run directory exists; one that fits
// passes.
func TestCheckData(t *testing.T) {
	conf := func(sets ...string) *config.Config {
		c, err := config.Parse([]byte("name = \"a\"\n[model]\nrecipe = \"resnet\"\n[data]\nkind = \"images\"\ntrain = \"/data/train\"\nval = \"/data/val\"\nbatch_size = 8\n"), "a.toml")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Override(sets...); err != nil {
			t.Fatal(err)
		}
		return c
	}
	classifier := &artifacts.Manifest{Classes: 3, Data: []artifacts.Tensor{
		{Name: "images", DType: "float32", Shape: []int64{-1, 3, 32, 32}},
		{Name: "target", DType: "int64", Shape: []int64{-1}},
	}}
	images := shapes{spec: []data.TensorSpec{spec("image", data.Float32, 3, 32, 32), spec("label", data.Int64)}}
	fed := conf(`data.feeds.images="image"`)
	if err := CheckData(fed, classifier, images, images.with([]string{"a", "b"})); err != nil {
		t.Errorf("a loader that fits: %v", err)
	}
	fixed := &artifacts.Manifest{Data: []artifacts.Tensor{{Name: "image", DType: "float32", Shape: []int64{4, 3, 32, 32}}}}
	for _, tc := range []struct {
		what   string
		c      *config.Config
		m      *artifacts.Manifest
		train  data.Dataset
		key    string
		saying string
	}{
		{"no feed for the model's name", conf(), classifier, images, "data.feeds", `[data.feeds] images = "NAME"`},
		{"a feed key naming no input", conf(`data.feeds.images="image"`, `data.feeds.imagez="image"`), classifier, images, "data.feeds.imagez", "its batch inputs are images, target"},
		{"another size", fed, classifier, shapes{spec: []data.TensorSpec{spec("image", data.Float32, 3, 64, 64), spec("label", data.Int64)}}, "data.images.size", "takes [3 32 32] per sample, but the loader gives [3 64 64]"},
		{"another layout", fed, classifier, shapes{spec: []data.TensorSpec{spec("image", data.Float32, 32, 32, 3), spec("label", data.Int64)}}, "data.images.size", `data.images.layout = "NCHW"`},
		{"another rank", fed, classifier, shapes{spec: []data.TensorSpec{spec("image", data.Float32, 32, 32), spec("label", data.Int64)}}, "data.images.size", "has 4 axes"},
		{"another type", fed, classifier, shapes{spec: []data.TensorSpec{spec("image", data.Uint8, 3, 32, 32), spec("label", data.Int64)}}, "data.feeds", "is float32, but the loader gives uint8"},
		{"a fixed batch", conf(), fixed, images, "data.batch_size", "fixed batch of 4, but data.batch_size is 8"},
		{"more classes than outputs", fed, classifier, images.with([]string{"a", "b", "c", "d", "e"}), "data.train", `5 class folders, but the model has 3 outputs: the classes past "c" (d, e)`},
	} {
		err := CheckData(tc.c, tc.m, tc.train, nil)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Key != tc.key || !strings.Contains(err.Error(), tc.saying) {
			t.Errorf("%s: %v; want a config error on %s saying %q", tc.what, err, tc.key, tc.saying)
		}
	}
	if err := CheckData(fed, classifier, images, images.with([]string{"a", "b", "c", "d"})); err == nil || !strings.Contains(err.Error(), "data.val: /data/val has 4 class folders") {
		t.Errorf("more validation classes than outputs: %v", err)
	}
}
