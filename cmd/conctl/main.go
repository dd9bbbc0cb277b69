// Command conctl is the converge command line: see docs/cli.md or
// conctl --help.
package main

import (
	"os"

	"github.com/converge-run/converge/cli"
)

// BuildVersion is stamped by `just build` (-ldflags -X main.BuildVersion=…).
var BuildVersion = "dev"

func main() { os.Exit(cli.Main(BuildVersion)) }
