// Command ortrain trains and evaluates ONNX models on ONNX Runtime.
//
// Each command lives in a file of its own and only parses flags and calls
// the library packages. Exit codes: 0 done, 1 failed, 2 bad usage or bad
// input, 3 a bug in ortrain (a panic, reported with its stack).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/ort"
)

// version is set at release builds with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) (code int) {
	// A panic is a bug, not a refusal: it must not exit 2 as Go's runtime
	// does, where scripts read "bad input".
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "ortrain: bug: %v\n%s\nplease report it with the command line\n", r, debug.Stack())
			code = exitBug
		}
	}()
	invocation = args
	app := newApp(stdout, stderr)
	err := app.Run(flagsFirst(app, args))
	if err == nil {
		finishJob()
		return 0
	}
	fmt.Fprintln(stderr, "ortrain:", err)
	code = exitCode(err)
	var together interface{ EveryRank() bool }
	switch {
	case abortJob == nil:
	case errors.As(err, &together) && together.EveryRank():
		finishJob() // every rank refused together: none waits for another
	default:
		// A data-parallel rank that fails ends the job: the others would
		// wait for it in their next collective.
		abortJob(code)
	}
	return code
}

// newApp is the command line: the global flags and every command, each
// command's flag errors reported as usage errors.
func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Writer:    stdout,
		ErrWriter: stderr,
		Name:      "ortrain",
		Usage:     "train and evaluate ONNX models on ONNX Runtime",
		Version:   version,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "ort-lib", Usage: "ONNX Runtime shared library to load (else $" + ort.LibraryEnv + ", the run config, .cache/ort-cuda for a run on a GPU, .cache/ort, the system path)"},
		},
		Commands:       commands(),
		ExitErrHandler: func(*cli.Context, error) {}, // run decides the exit code
		// --set optimizer.betas=[0.9,0.95] is one value: commas do not split it.
		DisableSliceFlagSeparator: true,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
	}
	// Every subcommand's flag errors are usage errors too (urfave/cli only
	// routes the app's own through OnUsageError).
	var route func([]*cli.Command)
	route = func(cmds []*cli.Command) {
		for _, c := range cmds {
			if c.OnUsageError == nil {
				c.OnUsageError = app.OnUsageError
			}
			route(c.Subcommands)
		}
	}
	route(app.Commands)
	return app
}

// flagsFirst moves a command's positional arguments after its flags, so
// `ortrain report RUN --out F` parses as the usage lines show it (urfave/cli
// stops reading flags at the first positional argument). A flag's value is
// told from a positional argument by the flag's kind; "--" ends the flags.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	i := 1
	// The app's own flags, then the command path.
	cmds := app.Commands
	flags := app.Flags
	for i < len(args) {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			out = append(out, a)
			if takesValue(flags, a) && i+1 < len(args) {
				out = append(out, args[i+1])
				i++
			}
			i++
			continue
		}
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				next = c
			}
		}
		if next == nil {
			break
		}
		out = append(out, a)
		cmds, flags = next.Subcommands, next.Flags
		i++
	}
	var positional []string
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			out = append(out, a)
			if takesValue(flags, a) && i+1 < len(args) {
				out = append(out, args[i+1])
				i++
			}
		default:
			positional = append(positional, a)
		}
	}
	return append(out, positional...)
}

// takesValue reports whether the flag token arg (-name or --name, without
// "=value") names a flag among flags that reads the next argument.
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*cli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}

// commands are ortrain's subcommands, in the order --help lists them.
func commands() []*cli.Command {
	return append([]*cli.Command{
		trainCommand(), evalCommand(), sampleCommand(), artifactsCommand(), reportCommand(),
		planCommand(), doctorCommand(), exportCommand(), quickstartCommand(), benchCommand(),
	}, testCommands...)
}

// testCommands are added by tests (a command that panics, to check how a
// bug exits); none in the binary.
var testCommands []*cli.Command

// exitBug is the exit code of a panic.
const exitBug = 3

// usageError is a command line ortrain cannot parse.
type usageError struct{ error }

func (usageError) BadInput() bool { return true }

// exitCode is 2 for errors the user fixes by changing the input (those that
// say so with a BadInput method), 1 for the rest.
func exitCode(err error) int {
	var bad interface{ BadInput() bool }
	if errors.As(err, &bad) && bad.BadInput() {
		return 2
	}
	// urfave/cli reports a missing Required flag with an unexported type;
	// its message is the only handle on it.
	if strings.HasPrefix(err.Error(), "Required flag") {
		return 2
	}
	// urfave/cli's own exits (an unknown command or help topic, which it
	// gives code 3) are usage errors; ortrain keeps 3 for its bugs.
	var coder cli.ExitCoder
	if errors.As(err, &coder) && coder.ExitCode() != 0 {
		return 2
	}
	return 1
}

// loadORT finds and loads ONNX Runtime; configLib is the run config's ort_lib.
func loadORT(c *cli.Context, configLib string) error {
	path, err := ort.FindLibrary(ort.LibrarySearch{Flag: c.String("ort-lib"), Config: configLib})
	if err != nil {
		return err
	}
	return ort.Init(path)
}
