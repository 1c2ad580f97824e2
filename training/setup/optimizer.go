package setup

import (
	"fmt"
	"slices"

	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/optim"
)

// AdoptOptimizer makes c's [optimizer] the one baked into the artifacts'
// optimizer.onnx (only the learning rate is fed each step): a key the
// user set to another value is refused, since it would not apply, and the
// keys left unset take the artifacts' values, so that the run's
// config.toml, plan and report say what trains (prebuilt SGD artifacts
// carry momentum 0.9 where the config's default is 0).
func AdoptOptimizer(c *config.Config, m *artifacts.Manifest) error {
	o, g := &c.Optimizer, m.Optimizer.Config
	type key struct {
		name      string
		cfg, have any
		adopt     func()
	}
	keys := []key{
		{"optimizer.name", o.Name, g.Kind, func() { o.Name = g.Kind }},
		{"optimizer.weight_decay", o.WeightDecay, g.WeightDecay, func() { o.WeightDecay = g.WeightDecay }},
		{"optimizer.decay_bias_and_norm", o.DecayBiasAndNorm, g.NoDecay != nil && len(g.NoDecay) == 0, func() { o.DecayBiasAndNorm = g.NoDecay != nil && len(g.NoDecay) == 0 }},
		{"optimizer.ema_decay", o.EMADecay, g.EMADecay, func() { o.EMADecay = g.EMADecay }},
	}
	switch g.Kind {
	case optim.SGD:
		keys = append(keys,
			key{"optimizer.momentum", o.Momentum, g.Momentum, func() { o.Momentum = g.Momentum }},
			key{"optimizer.nesterov", o.Nesterov, g.Nesterov, func() { o.Nesterov = g.Nesterov }})
	default:
		have := []float64{g.Beta1, g.Beta2}
		keys = append(keys,
			key{"optimizer.eps", o.Eps, g.Eps, func() { o.Eps = g.Eps }},
			key{"optimizer.betas", fmt.Sprint(o.Betas), fmt.Sprint(have), func() { o.Betas = slices.Clone(have) }})
	}
	for _, k := range keys {
		switch {
		case k.cfg == k.have:
		case c.IsSet(k.name):
			return &config.Error{Key: k.name, Msg: fmt.Sprintf("%v, but the artifacts' optimizer.onnx has %v baked in; rebuild the artifacts or drop the key", k.cfg, k.have)}
		default:
			k.adopt()
		}
	}
	return nil
}
