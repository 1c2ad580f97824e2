package setup

import (
	"strings"
	"testing"

	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/loss"
)

// TestSameLoss: with prebuilt artifacts, a model.loss other than the
// default must be the loss they were built with (it is baked into their
// training graph); one that differs is refused naming the key and the
// artifacts' loss, not ignored.
func TestSameLoss(t *testing.T) {
	m := &artifacts.Manifest{Outputs: []string{"y", "aux"}, LossSpec: loss.Spec{Kind: loss.MSE}}
	for _, ok := range []string{"loss", "", "mse", "mse:y"} {
		if err := sameLoss(ok, "/art", m); err != nil {
			t.Errorf("model.loss %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"l1", "mse:aux", "total_loss", "output:loss2"} {
		err := sameLoss(bad, "/art", m)
		if err == nil || !strings.Contains(err.Error(), "model.loss") || !strings.Contains(err.Error(), `mse reads the model's first output "y"`) {
			t.Errorf("model.loss %q: err %v, want a refusal naming model.loss and the artifacts' loss", bad, err)
		}
	}
	own := &artifacts.Manifest{Outputs: []string{"total", "logits"}, LossSpec: loss.Spec{Kind: loss.Output, Output: "total"}}
	for _, ok := range []string{"total", "output:total"} {
		if err := sameLoss(ok, "/art", own); err != nil {
			t.Errorf("model.loss %q on the model's own loss: %v", ok, err)
		}
	}
	if err := sameLoss("cross_entropy:logits", "/art", own); err == nil {
		t.Error("a built-in loss over artifacts with the model's own: accepted")
	}
}
