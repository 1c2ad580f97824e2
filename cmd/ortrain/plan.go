package main

import "github.com/urfave/cli/v2"

func planCommand() *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "not built yet: run planning, issue 8",
		UsageText: "ortrain plan --config CONFIG",
		Action:    notBuilt("plan", "run planning, issue 8"),
	}
}
