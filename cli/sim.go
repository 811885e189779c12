package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// simCommand is `mrmarket sim`: the papers' experiments on the simulator.
func simCommand() *ucli.Command {
	return &ucli.Command{
		Name:        "sim",
		Usage:       "reproduce the papers' results on the simulator, with the product's broker, strategies and agents",
		Subcommands: []*ucli.Command{simListCommand(), simDescribeCommand(), simRunCommand(), simResultsCommand()},
	}
}

// experimentEntry is one line of `sim list`.
type experimentEntry struct {
	Name, Title, Source string
	Engine              experiments.Engine `json:"engine"`
	DefaultRuns         int                `json:"default_runs"`
}

func simListCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "list",
		Usage:     "list the experiments",
		UsageText: "mrmarket sim list",
		Flags:     outputFlags(),
		Action: func(c *ucli.Context) error {
			var list []experimentEntry
			for _, e := range experiments.List() {
				list = append(list, experimentEntry{e.Name, e.Title, e.Source, e.Engine, e.DefaultRuns})
			}
			return show(c, list, func(w *out, list []experimentEntry) error {
				t := w.table("EXPERIMENT", "RUNS", "CODE", "SOURCE", "TITLE")
				for _, e := range list {
					t.row(e.Name, fmt.Sprint(e.DefaultRuns), string(e.Engine), e.Source, e.Title)
				}
				return t.flush()
			})
		},
	}
}

// setArgs are the --set arguments, in order; a value keeps its commas
// (a list parameter is comma-separated).
type setArgs []string

func (s *setArgs) Set(v string) error { *s = append(*s, v); return nil }
func (s *setArgs) String() string     { return strings.Join(*s, " ") }

// experimentInfo is `sim describe`'s answer.
type experimentInfo struct {
	experimentEntry
	Params []experiments.Param `json:"params"`
}

func simDescribeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "describe",
		ArgsUsage: "EXPERIMENT",
		Usage:     "an experiment's source and the parameters `sim run --set` changes, with their defaults",
		UsageText: "mrmarket sim describe mrm-pricing",
		Flags:     outputFlags(),
		Action: func(c *ucli.Context) error {
			if c.NArg() == 0 {
				return badInput("name one experiment (see `mrmarket sim list`)")
			}
			if err := flagsAfter(c); err != nil {
				return err
			}
			e, err := experiments.Get(c.Args().First())
			if err != nil {
				return usageError{err}
			}
			info := experimentInfo{experimentEntry{e.Name, e.Title, e.Source, e.Engine, e.DefaultRuns}, e.Params()}
			return show(c, info, func(w *out, info experimentInfo) error {
				w.note("%s — %s (%s); %d runs by default\ncode: %s\n", info.Name, info.Title, info.Source, info.DefaultRuns, info.Engine.Describe())
				if len(info.Params) == 0 {
					return w.note("no parameters to --set\n")
				}
				t := w.table("PARAMETER", "DEFAULT", "MEANING")
				for _, p := range info.Params {
					t.row(p.Name, p.Default, p.Doc)
				}
				return t.flush()
			})
		},
	}
}

func simRunCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "run",
		ArgsUsage: "EXPERIMENT [flags]",
		Usage:     "run an experiment: the paper's figure beside ours (mean ± sd over runs) and their ratio",
		UsageText: "mrmarket sim run s003-stage [--seed 1] [--runs 25] [--set name=value ...] [--json] [--out results/]\n\n" +
			"Each run is a seed; the same seed gives the same numbers. --out writes EXPERIMENT.json and .svg.\n" +
			"`mrmarket sim describe NAME` lists the parameters --set changes.",
		Flags: outputFlags(
			&ucli.Uint64Flag{Name: "seed", Usage: "the first run's seed", Value: 1},
			&ucli.GenericFlag{Name: "set", Usage: "change a parameter: name=value, a list comma-separated (repeat; see `sim describe NAME`)", Value: &setArgs{}},
			&ucli.IntFlag{Name: "runs", Usage: "runs (seeds) per configuration (default: the experiment's)"},
			&ucli.StringFlag{Name: "out", Usage: "directory to write EXPERIMENT.json and EXPERIMENT.svg into"},
		),
		Action: func(c *ucli.Context) error {
			if c.NArg() == 0 {
				return badInput("name one experiment (see `mrmarket sim list`)")
			}
			if err := flagsAfter(c); err != nil {
				return err
			}
			e, err := experiments.Get(c.Args().First())
			if err != nil {
				return usageError{err}
			}
			if err := checkRuns(c); err != nil {
				return err
			}
			set, err := experiments.ParseSet(*c.Generic("set").(*setArgs))
			if err != nil {
				return usageError{err}
			}
			res, err := e.Run(c.Context, experiments.Config{Seed: c.Uint64("seed"), Runs: c.Int("runs"), Set: set, Progress: progressBar(c.App.ErrWriter, e.Name)})
			if errors.Is(err, experiments.ErrParam) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if dir := c.String("out"); dir != "" {
				if err := experiments.Save(dir, res); err != nil {
					return err
				}
			}
			return show(c, res, printResult)
		},
	}
}

func simResultsCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "results",
		Usage:     "run every experiment and write RESULTS.md with its tables and plots (make results)",
		UsageText: "mrmarket sim results --out docs [--runs N] [--seed 1]",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "out", Usage: "directory for RESULTS.md; the data and plots go in its results/", Value: "docs"},
			&ucli.IntFlag{Name: "runs", Usage: "runs per configuration (default: each experiment's)"},
			&ucli.Uint64Flag{Name: "seed", Usage: "the first run's seed", Value: 1},
		},
		Action: func(c *ucli.Context) error {
			if err := checkRuns(c); err != nil {
				return err
			}
			dir := c.String("out")
			var all []experiments.Result
			for _, e := range experiments.List() {
				res, err := e.Run(c.Context, experiments.Config{Seed: c.Uint64("seed"), Runs: c.Int("runs"), Progress: progressBar(c.App.ErrWriter, e.Name)})
				if err != nil {
					return err
				}
				if err := experiments.Save(filepath.Join(dir, "results"), res); err != nil {
					return err
				}
				all = append(all, res)
			}
			var page bytes.Buffer
			if err := experiments.WriteMarkdown(&page, all, "results", time.Now()); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "RESULTS.md"), page.Bytes(), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "wrote %s and %d experiments' data and plots in %s\n", filepath.Join(dir, "RESULTS.md"), len(all), filepath.Join(dir, "results"))
			return nil
		},
	}
}

// checkRuns checks --runs: 0 is each experiment's default.
func checkRuns(c *ucli.Context) error {
	if r := c.Int("runs"); r < 0 || r > 10_000 {
		return badInput("--runs must be between 1 and 10000, got %d", r)
	}
	return nil
}

// flagsAfter applies the flags given after the experiment's name
// (`sim run lin --runs 2`), which the flag parser leaves as arguments.
func flagsAfter(c *ucli.Context) error {
	rest := c.Args().Tail()
	if len(rest) == 0 {
		return nil
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range c.Command.Flags {
		if err := f.Apply(fs); err != nil {
			return err
		}
	}
	if err := fs.Parse(rest); err != nil {
		return badInput("%v", err)
	}
	if fs.NArg() > 0 {
		return badInput("one experiment at a time; unexpected %q", fs.Args())
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if _, shared := f.Value.(*setArgs); shared {
			return // the command's own value: parsing fs set it already
		}
		if e := c.Set(f.Name, f.Value.String()); e != nil && err == nil {
			err = badInput("--%s: %v", f.Name, e)
		}
	})
	return err
}

// progressBar draws "name [#####.....] done/total" on w, in place, when w
// is a terminal; elsewhere (a file, a pipe, a test) it draws nothing.
func progressBar(w io.Writer, name string) func(done, total int) {
	if !isTerminal(w) {
		return nil
	}
	return drawProgress(w, name)
}

// drawProgress is progressBar's drawing.
func drawProgress(w io.Writer, name string) func(done, total int) {
	return func(done, total int) {
		const width = 30
		n := width * done / max(total, 1)
		fmt.Fprintf(w, "\r%s [%s%s] %d/%d", name, strings.Repeat("#", n), strings.Repeat(".", width-n), done, total)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}

// printResult is the side-by-side table.
func printResult(w *out, res experiments.Result) error {
	w.note("%s — %s (%s); seed %d, %d runs, %s\n", res.Experiment, res.Title, res.Source, res.Seed, res.Runs, span(res.Wall))
	if len(res.Set) > 0 {
		set := make([]string, 0, len(res.Set))
		for _, name := range slices.Sorted(maps.Keys(res.Set)) {
			set = append(set, name+"="+res.Set[name])
		}
		w.note("set: %s\n", strings.Join(set, " "))
	}
	t := w.table("METRIC", "PAPER", "OURS (MEAN ± SD)", "RATIO")
	for _, r := range res.Rows {
		t.row(r.Metric, r.PaperString(), r.OursString(), r.RatioString())
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, n := range res.Notes {
		w.note("note: %s\n", n)
	}
	return nil
}
