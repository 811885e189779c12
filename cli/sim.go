package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// simCommand is `mrmarket sim`: the papers' experiments on the simulator.
func simCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "sim",
		Usage: "reproduce the papers' results on the simulator, with the product's broker, strategies and agents",
		Subcommands: []*ucli.Command{{
			Name:      "list",
			Usage:     "list the experiments",
			UsageText: "mrmarket sim list",
			Flags:     []ucli.Flag{flagJSON()},
			Action: func(c *ucli.Context) error {
				type entry struct {
					Name, Title, Source string
					DefaultRuns         int `json:"default_runs"`
				}
				var list []entry
				for _, e := range experiments.List() {
					list = append(list, entry{e.Name, e.Title, e.Source, e.DefaultRuns})
				}
				return output(c, list, func(w io.Writer) error {
					t := newTable(w, "EXPERIMENT", "RUNS", "SOURCE", "TITLE")
					for _, e := range list {
						t.row(e.Name, fmt.Sprint(e.DefaultRuns), e.Source, e.Title)
					}
					return t.flush()
				})
			},
		}, {
			Name:  "run",
			Usage: "run an experiment: the paper's figure beside ours (mean ± sd over runs) and their ratio",
			UsageText: "mrmarket sim run s003-stage [--seed 1] [--runs 25] [--json] [--out results/]\n\n" +
				"Each run is a seed; the same seed gives the same numbers. --out writes EXPERIMENT.json.",
			Flags: []ucli.Flag{flagJSON(),
				&ucli.Uint64Flag{Name: "seed", Usage: "the first run's seed", Value: 1},
				&ucli.IntFlag{Name: "runs", Usage: "runs (seeds) per configuration (default: the experiment's)"},
				&ucli.StringFlag{Name: "out", Usage: "directory to write EXPERIMENT.json into"},
			},
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
				if r := c.Int("runs"); r < 0 || r > 10_000 {
					return badInput("--runs must be between 1 and 10000, got %d", r)
				}
				cfg := experiments.Config{Seed: c.Uint64("seed"), Runs: c.Int("runs")}
				if !c.Bool("json") {
					cfg.Progress = progressBar(c.App.ErrWriter, e.Name)
				}
				res, err := e.Run(c.Context, cfg)
				if err != nil {
					return err
				}
				if dir := c.String("out"); dir != "" {
					if err := writeResult(dir, res); err != nil {
						return err
					}
				}
				return output(c, res, func(w io.Writer) error { return printResult(w, res) })
			},
		}},
	}
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
		if e := c.Set(f.Name, f.Value.String()); e != nil && err == nil {
			err = badInput("--%s: %v", f.Name, e)
		}
	})
	return err
}

// progressBar draws "name [#####.....] done/total" on w, in place.
func progressBar(w io.Writer, name string) func(done, total int) {
	return func(done, total int) {
		const width = 30
		n := width * done / max(total, 1)
		fmt.Fprintf(w, "\r%s [%s%s] %d/%d", name, strings.Repeat("#", n), strings.Repeat(".", width-n), done, total)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}

func writeResult(dir string, res experiments.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, res.Experiment+".json"), append(b, '\n'), 0o644)
}

// printResult is the side-by-side table.
func printResult(w io.Writer, res experiments.Result) error {
	fmt.Fprintf(w, "%s — %s (%s); seed %d, %d runs, %s\n", res.Experiment, res.Title, res.Source, res.Seed, res.Runs, res.Wall.Round(1e6))
	t := newTable(w, "METRIC", "PAPER", "OURS (MEAN ± SD)", "RATIO")
	for _, r := range res.Rows {
		num := func(v float64) string {
			if r.Unit == "%" {
				return fmt.Sprintf("%.1f%%", 100*v)
			}
			return fmt.Sprintf("%.2f", v)
		}
		paper := r.PaperText
		if paper == "" {
			paper = "—"
			if !math.IsNaN(r.Paper) {
				paper = num(r.Paper)
			}
		}
		ratio := "—"
		if q := r.Ratio(); !math.IsNaN(q) {
			ratio = fmt.Sprintf("%.2f", q)
		}
		t.row(r.Metric, paper, num(r.Mean)+" ± "+strings.TrimSuffix(num(r.SD), "%"), ratio)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, n := range res.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}
