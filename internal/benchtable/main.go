// Command benchtable runs `go test -bench …`, passes its output through to
// stderr as it comes, and prints one table of every benchmark's headline
// figures on stdout: each figure a benchmark reports (ns/op unless it
// reports its wall time itself; never B/op or allocs/op), the goal it is held to where the project has one, and,
// beside a figure of a new path, its ratio to the old path's figure
// measured in the same run. Benchmarks that skipped are listed with their
// reason, so a suite skipped for want of PostgreSQL or QEMU does not look
// measured (go test prints a skip's reason only under -v). `make bench` runs
//
//	go run ./internal/benchtable go test -p 1 -v -run '^$' -bench . ./...
//
// It exits with the test command's status.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchtable go test -bench … [packages]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	t := parse(io.TeeReader(out, os.Stderr))
	err = cmd.Wait()
	t.print(os.Stdout)
	if err != nil {
		if x, ok := err.(*exec.ExitError); ok {
			os.Exit(x.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
}

// figure is one value a benchmark reported.
type figure struct {
	pkg, bench, unit string
	value            float64
}

// table is what the run printed: the figures in order and the benchmarks
// that skipped, with their reasons.
type table struct {
	figures []figure
	skipped []string
}

var (
	// resultLine is a benchmark's result: its name (with the -GOMAXPROCS
	// suffix), the iterations, then value-unit pairs.
	resultLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)
	skipLine   = regexp.MustCompile(`^\s*--- SKIP: (Benchmark\S+)`)
)

// parse reads `go test -bench` output.
func parse(r io.Reader) *table {
	t := &table{}
	pkg := ""
	reason := "" // the last line a benchmark logged: a skip's reason, under -v
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "    ") {
			reason = strings.TrimSpace(line)
			continue
		}
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(p, "github.com/mrmarket/mrmarket/")
			continue
		}
		if m := skipLine.FindStringSubmatch(line); m != nil {
			t.skipped = append(t.skipped, pkg+" "+m[1]+": "+reason)
			continue
		}
		if strings.HasPrefix(line, "Benchmark") {
			reason = ""
		}
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fields := strings.Fields(m[2])
		var own, perOp []figure
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			f := figure{pkg: pkg, bench: m[1], unit: fields[i+1], value: v}
			switch f.unit {
			case "ns/op":
				perOp = append(perOp, f)
			case "B/op", "allocs/op", "MB/s":
			default:
				own = append(own, f)
			}
		}
		timed := slices.ContainsFunc(own, func(f figure) bool { return f.unit == "wall-s" })
		for _, f := range perOp {
			if _, held := goalOf(f); held || !timed {
				own = append([]figure{f}, own...)
			}
		}
		t.figures = append(t.figures, own...)
	}
	return t
}

// print writes the table.
func (t *table) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "package\tbenchmark\tfigure\tunit\tgoal\tnew/old\t")
	for _, f := range t.figures {
		goal := ""
		if g, ok := goalOf(f); ok {
			goal = g.String(f.value)
		}
		ratio := ""
		if old, ok := t.oldOf(f); ok && old.value != 0 {
			ratio = fmt.Sprintf("%.3g×", f.value/old.value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", f.pkg, strings.TrimPrefix(f.bench, "Benchmark"), number(f.value), f.unit, goal, ratio)
	}
	_ = tw.Flush()
	for _, s := range t.skipped {
		fmt.Fprintln(w, "not run:", s)
	}
}

// oldOf is the old path's figure beside f, a new path's figure: the same
// benchmark and unit with "old" for "new" in the unit, or in the last
// element of the benchmark's name.
func (t *table) oldOf(f figure) (figure, bool) {
	unit, bench := f.unit, f.bench
	switch {
	case strings.HasPrefix(unit, "new-"):
		unit = "old-" + strings.TrimPrefix(unit, "new-")
	case strings.HasSuffix(bench, "/new") || strings.Contains(bench, "/new/"):
		bench = strings.Replace(bench, "/new", "/old", 1)
	default:
		return figure{}, false
	}
	for _, o := range t.figures {
		if o.pkg == f.pkg && o.bench == bench && o.unit == unit {
			return o, true
		}
	}
	return figure{}, false
}

// number prints v with at most four significant digits, without an
// exponent below a billion.
func number(v float64) string {
	if v >= 1e4 && v < 1e9 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
