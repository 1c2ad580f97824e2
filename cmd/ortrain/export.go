package main

import "github.com/urfave/cli/v2"

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "not built yet: the PyTorch export route, issue 8",
		UsageText: "ortrain export",
		Action:    notBuilt("export", "the PyTorch export route, issue 8"),
	}
}
