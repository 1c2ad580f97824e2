package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/export"
)

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:  "export",
		Usage: "write a trained checkpoint for inference, or a recipe's forward graph, as ONNX",
		UsageText: `ortrain export --checkpoint PATH [--config C] [--part encoder|decoder] --out FILE
ortrain export (--recipe NAME | --preset NAME) [--set model.params.key=value]... --out FILE [--strip-markers]`,
		Description: `With --checkpoint (a checkpoint directory, a run's version directory, or last
or best with --config): writes the model for inference with the checkpoint's
weights as initializers: the eval graph (BatchNorm on its running
statistics) without the loss and its scalar terms, so only data is fed; with
--part, a part of a built-in recipe (the VQ-GAN's encoder: volume to codes;
decoder: codes to reconstruction). --set applies to the checkpoint's
configuration as in eval.

Otherwise builds the recipe with its [model.params] (from --set, or from a preset with
--set on top) and writes it as one ONNX file that ortrain artifacts build
reads; the command to build it is printed. The recipe's own loss output and
its StopGradient markers (domain "ortrain", which artifacts build needs) are
kept; --strip-markers removes the markers for viewers such as Netron. An
existing --out is never overwritten.

Examples:
   ortrain export --checkpoint outputs/vqgan3d-h200/version_0 --out vqgan.onnx
   ortrain export --checkpoint best --config run.toml --part decoder --out decoder.onnx
   ortrain export --preset vqgan3d-h200 --out vqgan3d.onnx
   ortrain export --recipe resnet --set model.params.depth=18 --set model.params.classes=10 --out resnet18.onnx
   ortrain export --recipe bd3lm --set model.params.layers=2 --out lm.onnx --strip-markers`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "export this checkpoint's trained model (a checkpoint or version directory, last or best)"},
			&cli.StringFlag{Name: "config", Usage: "with --checkpoint: run configuration to use instead of the checkpoint's"},
			&cli.StringFlag{Name: "part", Usage: "with --checkpoint: export only this part of the recipe (vqgan3d: encoder, decoder)"},
			&cli.StringFlag{Name: "recipe", Usage: "built-in recipe: " + strings.Join(models.Names(), ", ")},
			&cli.StringFlag{Name: "preset", Usage: "take the recipe and its parameters from a preset: " + strings.Join(configs.Names(), ", ")},
			&cli.StringSliceFlag{Name: "set", Usage: "a recipe parameter: --set model.params.depth=18; with --checkpoint, any key of its configuration (repeatable)"},
			&cli.StringFlag{Name: "out", Usage: "ONNX file to write (must not exist)"},
			&cli.BoolFlag{Name: "strip-markers", Usage: "drop the ortrain.StopGradient markers (for viewers; such a file does not train right)"},
		},
		Action: func(c *cli.Context) error {
			if err := outFolderExists("--out", c.String("out")); err != nil {
				return err
			}
			if c.IsSet("checkpoint") {
				return exportCheckpoint(c)
			}
			for _, f := range []string{"config", "part"} {
				if c.IsSet(f) {
					return usageError{fmt.Errorf("--%s applies to --checkpoint", f)}
				}
			}
			out := c.String("out")
			if out == "" {
				return usageError{fmt.Errorf("give --out FILE, the ONNX file to write")}
			}
			cfg := config.Default()
			switch recipe, preset := c.String("recipe"), c.String("preset"); {
			case recipe != "" && preset != "":
				return usageError{fmt.Errorf("give --recipe or --preset, not both")}
			case recipe != "":
				cfg.Model.Recipe = recipe
			case preset != "":
				var err error
				if cfg, err = configs.Load(preset); err != nil {
					return err
				}
			default:
				return usageError{fmt.Errorf("give --recipe NAME or --preset NAME")}
			}
			for _, s := range c.StringSlice("set") {
				if !strings.HasPrefix(s, "model.params.") {
					return usageError{fmt.Errorf("--set %s: export takes model.params.* only", s)}
				}
			}
			if err := cfg.Override(c.StringSlice("set")...); err != nil {
				return err
			}
			res, err := export.Recipe(export.Options{Recipe: cfg.Model.Recipe, Params: cfg.Model.Params, Out: out, StripMarkers: c.Bool("strip-markers")})
			if err != nil {
				return err
			}
			w := c.App.Writer
			fmt.Fprintf(w, "wrote %s: recipe %s, %d parameters, inputs %s, outputs %s, %d StopGradient markers\n",
				out, cfg.Model.Recipe, res.Params, strings.Join(res.Inputs, ", "), strings.Join(res.Outputs, ", "), res.Markers)
			if res.External != "" {
				fmt.Fprintf(w, "weights in %s\n", res.External)
			}
			if !c.Bool("strip-markers") {
				build := "ortrain artifacts build --model " + out + " --out artifacts"
				if res.Loss != "" {
					build += " --loss " + res.Loss
					if res.LabelSmoothing > 0 {
						build += " --label-smoothing " + strconv.FormatFloat(res.LabelSmoothing, 'g', -1, 64)
					}
				}
				fmt.Fprintln(w, "build the training artifacts with:\n   "+build)
			}
			return nil
		},
	}
}

// exportCheckpoint writes a trained checkpoint for inference.
func exportCheckpoint(c *cli.Context) error {
	for _, f := range []string{"recipe", "preset", "strip-markers"} {
		if c.IsSet(f) {
			return usageError{fmt.Errorf("--%s does not go with --checkpoint: the checkpoint's configuration names the model", f)}
		}
	}
	var cfg *config.Config
	if path := c.String("config"); path != "" {
		var err error
		if cfg, err = loadConfig(path, c.StringSlice("set")); err != nil {
			return err
		}
	}
	if err := loadORT(c, ""); err != nil {
		return err
	}
	res, err := eval.ExportCheckpoint(eval.ExportOptions{Checkpoint: c.String("checkpoint"), Config: cfg, Sets: setsWithoutConfig(c),
		Part: c.String("part"), Out: c.String("out")})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "wrote %s from %s (step %d): inputs %s, outputs %s\n", c.String("out"), res.Checkpoint, res.Step,
		strings.Join(res.Inputs, ", "), strings.Join(res.Outputs, ", "))
	if res.External != "" {
		fmt.Fprintf(c.App.Writer, "weights in %s\n", res.External)
	}
	return nil
}
