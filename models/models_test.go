package models_test

import (
	"strings"
	"testing"

	"github.com/ortrain/ortrain/models"
)

// TestBuildParams checks parameter decoding: known names lay over the
// defaults, integers are taken for floats, and unknown names, wrong types,
// impossible sizes and unknown recipes are errors that say what is wrong,
// from Build and from Check alike.
func TestBuildParams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		recipe  string
		params  map[string]any
		wantErr string // "" for success
		loss    string
	}{
		{"resnet tiny", "resnet", map[string]any{"depth": 18, "width": 4, "image_size": 32, "classes": 3, "label_smoothing": 0}, "", "cross_entropy"},
		{"vqgan tiny", "vqgan3d", map[string]any{"patch_size": []any{int64(4), int64(4), int64(4)}, "channels": 4, "channel_mult": []int{1}, "res_blocks": 1,
			"z_channels": 2, "embed_dim": 2, "codebook_size": 4, "groups": 2, "beta": 1}, "", "output:loss"},
		{"lm tiny", "bd3lm", map[string]any{"vocab": 10, "mask_token": 9, "hidden": 8, "layers": 1, "heads": 2, "seq_len": 4, "block_size": 2}, "", "output:loss"},
		{"unknown parameter", "resnet", map[string]any{"depth": 18, "dropout": 0.1}, "unknown parameters dropout", ""},
		{"wrong type", "bd3lm", map[string]any{"hidden": "wide"}, "hidden", ""},
		{"impossible size", "resnet", map[string]any{"depth": 20}, "depth 20", ""},
		{"unknown recipe", "gpt", nil, `unknown recipe "gpt"`, ""},
	} {
		m, err := models.Build(tc.recipe, tc.params)
		count, cerr := models.Check(tc.recipe, tc.params)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.wantErr)
			}
			if cerr == nil || !strings.Contains(cerr.Error(), tc.wantErr) {
				t.Errorf("%s: Check err = %v, want one mentioning %q", tc.name, cerr, tc.wantErr)
			}
			continue
		}
		if cerr != nil || count != m.ParamCount {
			t.Errorf("%s: Check = %d, %v; Build made %d parameters", tc.name, count, cerr, m.ParamCount)
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if m.Loss != tc.loss {
			t.Errorf("%s: loss %q, want %q", tc.name, m.Loss, tc.loss)
		}
		if got := models.CountParams(m.Graph); got != m.ParamCount {
			t.Errorf("%s: graph has %d parameters, recipe says %d", tc.name, got, m.ParamCount)
		}
		for in := range m.Feeds {
			if in == "target" {
				continue // added by artifacts.Build's built-in loss
			}
			found := false
			for _, gi := range m.Graph.Inputs {
				found = found || gi == in
			}
			if !found {
				t.Errorf("%s: Feeds names %q, which is not a graph input", tc.name, in)
			}
		}
	}
}

// TestParameterOfTheWrongType: a recipe parameter of the wrong type is
// named, not placed on a line of a file the user never wrote.
func TestParameterOfTheWrongType(t *testing.T) {
	_, err := models.Check("resnet", map[string]any{"classes": 3.0})
	if err == nil || !strings.Contains(err.Error(), "resnet: parameter classes: incompatible types") || strings.Contains(err.Error(), "line 1") {
		t.Errorf("classes = 3.0: %v", err)
	}
}
