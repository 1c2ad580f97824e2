package main

import "github.com/urfave/cli/v2"

func trainCommand() *cli.Command {
	return &cli.Command{
		Name:      "train",
		Usage:     "not built yet: the training loop, issue 5",
		UsageText: "ortrain train --config CONFIG",
		Action:    notBuilt("train", "the training loop, issue 5"),
	}
}
