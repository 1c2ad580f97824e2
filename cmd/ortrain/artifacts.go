package main

import "github.com/urfave/cli/v2"

func artifactsCommand() *cli.Command {
	return &cli.Command{
		Name:      "artifacts",
		Usage:     "not built yet: training artifacts, issue 3",
		UsageText: "ortrain artifacts build|inspect",
		Action:    notBuilt("artifacts", "training artifacts, issue 3"),
	}
}
