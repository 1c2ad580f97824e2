package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/training/config"
)

func sampleCommand() *cli.Command {
	return &cli.Command{
		Name:      "sample",
		Usage:     "generate text with a trained block-diffusion language model (bd3lm recipe)",
		UsageText: `ortrain sample --checkpoint PATH --prompt "question" [--steps N] [--temperature T] [--top-p P] [--seed S] [--json]`,
		Description: `Answers each --prompt as BD3-LM samples: the prompt fills the first
positions as training laid out questions, then block after block is
denoised from all masks in --steps steps, given the clean earlier blocks.
Each step goes from noise level t to s = t - 1/steps and reveals each
still-masked position with probability (t - s)/t (ancestral sampling of the
linear schedule; the last step reveals the rest), drawing its token from the
model's prediction at --temperature with --top-p nucleus filtering. With
BD3-LM's layout generation ends with the block holding <|endoftext|>; a model
trained on HDP-Diffusion's segments generates its plan and execution blocks.

Prints the text (and the GSM8K final answer after "####" when there is one);
--json prints the prompt, plan, text, final answer, generated token ids,
model runs, seconds and tokens per second.

Examples:
   ortrain sample --checkpoint outputs/bd3lm/version_0 --prompt "Tom has 3 apples and buys 4 more. How many does he have?"
   ortrain sample --checkpoint outputs/bd3lm/version_0 --prompt "..." --temperature 0 --json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Required: true, Usage: "a checkpoint directory, a run's version directory (its newest checkpoint), or last or best (the best by trainer.monitor; with --config)"},
			&cli.StringFlag{Name: "config", Usage: "run configuration to use instead of the checkpoint's"},
			&cli.StringSliceFlag{Name: "set", Usage: "override a key of the configuration (repeatable)"},
			&cli.StringSliceFlag{Name: "prompt", Required: true, Usage: "text to answer (repeatable)"},
			&cli.IntFlag{Name: "steps", Usage: "denoising steps per block (default: the block length, one position per step on average)"},
			&cli.IntFlag{Name: "block-size", Usage: "the block length to sample with; it must be the one the model was trained with (its attention mask is built for it)"},
			&cli.Float64Flag{Name: "temperature", Value: 1, Usage: "divides the logits before sampling; 0 takes the most likely token"},
			&cli.Float64Flag{Name: "top-p", Value: 1, Usage: "nucleus sampling: draw from the most likely tokens holding this probability"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the draws (a seed gives the same text every time)"},
			&cli.StringFlag{Name: "device", Usage: "cpu or cuda:N (default: the config's trainer.device)"},
			&cli.BoolFlag{Name: "json", Usage: "print each generation as a JSON object"},
		},
		Action: sampleAction,
	}
}

func sampleAction(c *cli.Context) error {
	d, err := decodingFlags(c)
	if err != nil {
		return err
	}
	var cfg *config.Config
	if path := c.String("config"); path != "" {
		if cfg, err = loadConfig(path, c.StringSlice("set")); err != nil {
			return err
		}
	}
	if err := loadORTOn(c, "", checkpointDevice(c, cfg)); err != nil {
		return err
	}
	opts, err := checkpointSession(c, cfg)
	if err != nil {
		return err
	}
	s, err := eval.NewSampler(eval.SamplerOptions{Checkpoint: c.String("checkpoint"), Config: cfg, Sets: setsWithoutConfig(c), Session: opts})
	if err != nil {
		return err
	}
	defer s.Close()
	trained := s.BlockSize()
	if c.IsSet("block-size") && c.Int("block-size") != trained {
		what := fmt.Sprintf("blocks of %d", trained)
		if trained == 0 {
			what = "HDP-Diffusion's segments"
		}
		return usageError{fmt.Errorf("--block-size %d: the model was trained with %s, and its attention mask is fixed to them", c.Int("block-size"), what)}
	}
	w := c.App.Writer
	if !c.Bool("json") {
		steps := fmt.Sprint(d.Steps)
		if d.Steps == 0 {
			steps = "block length"
		}
		fmt.Fprintf(w, "checkpoint %s (step %d), steps per block: %s, temperature %g, top-p %g, seed %d\n", s.Checkpoint(), s.Step(), steps, d.Temperature, d.TopP, d.Seed)
	}
	for _, prompt := range c.StringSlice("prompt") {
		g, err := s.Sample(prompt, d)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			if err := json.NewEncoder(w).Encode(g); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(w, "\nprompt: %s\n", g.Prompt)
		if g.Plan != "" {
			fmt.Fprintf(w, "plan:\n%s\n", g.Plan)
		}
		fmt.Fprintf(w, "answer:\n%s\n", g.Text)
		if g.Final != "" {
			fmt.Fprintf(w, "final answer: %s\n", g.Final)
		}
		fmt.Fprintf(w, "(%d blocks, %d model runs, %.2f s, %.1f tokens/s)\n", g.Blocks, g.ModelRuns, g.Seconds, g.TokensPerSecond)
	}
	return nil
}
