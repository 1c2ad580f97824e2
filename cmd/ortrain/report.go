package main

import "github.com/urfave/cli/v2"

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "not built yet: reports, issue 7",
		UsageText: "ortrain report RUN_DIR",
		Action:    notBuilt("report", "reports, issue 7"),
	}
}
