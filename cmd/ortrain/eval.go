package main

import "github.com/urfave/cli/v2"

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:      "eval",
		Usage:     "not built yet: evaluation, issue 7",
		UsageText: "ortrain eval --checkpoint PATH",
		Action:    notBuilt("eval", "evaluation, issue 7"),
	}
}
