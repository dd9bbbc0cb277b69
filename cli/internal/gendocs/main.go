// Command gendocs writes docs/cli.md from conctl's command tree:
//
//	go run ./cli/internal/gendocs -o docs/cli.md
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/converge-run/converge/cli"
)

func main() {
	out := flag.String("o", "docs/cli.md", "the file to write")
	flag.Parse()
	var b bytes.Buffer
	if err := cli.GenerateMarkdown(&b); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}
