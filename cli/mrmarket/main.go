// Command mrmarket is the one binary of mrmarket: the user commands and the
// daemons. Run `mrmarket --help`, or `mrmarket demo` to see the market work.
package main

import (
	"os"

	"github.com/mrmarket/mrmarket/cli"
)

func main() {
	os.Exit(cli.Main(os.Args, os.Stdout, os.Stderr))
}
