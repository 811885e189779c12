// Command testreport runs `go test -json …` and prints what `go test` prints
// without -v — a package's "ok" line, the output of the tests that failed,
// build errors, panics and time-outs — and, under each package, every test
// it skipped with the reason the test gave.
//
// Without it a suite that skipped for want of libvirt, PostgreSQL or
// Chromium prints "ok … 0.124s", the same line as one that ran; with -v the
// skips drown in every test's log. `make unit` runs each of its steps
// through it:
//
//	go run ./internal/testreport go test -json -race ./...
//
// It exits with the test command's status.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testreport go test -json [flags] [packages]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	failed := report(out, os.Stdout)
	err = cmd.Wait()
	switch {
	case err != nil:
		if x, ok := err.(*exec.ExitError); ok {
			os.Exit(x.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	case failed:
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build events
	Test       string
	Output     string
}

// pkg is what one package has said so far.
type pkg struct {
	tests   map[string][]string // a running test's output
	failed  []string            // output of the tests that failed, in order
	skipped []string            // a line per skipped test, with its reason
	own     []string            // the package's output outside any test
}

// report copies the events read from r to w as described in the package
// comment; it says whether any package or build failed. Lines that are not
// JSON (the go command's own messages) are copied as they are.
func report(r io.Reader, w io.Writer) bool {
	pkgs := map[string]*pkg{}
	get := func(name string) *pkg {
		p := pkgs[name]
		if p == nil {
			p = &pkg{tests: map[string][]string{}}
			pkgs[name] = p
		}
		return p
	}
	failed := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
			continue
		case "build-fail":
			failed = true
			continue
		}
		p := get(e.Package)
		if e.Test == "" {
			switch e.Action {
			case "output":
				p.own = append(p.own, e.Output)
			case "pass", "skip":
				flush(w, p, false)
				delete(pkgs, e.Package)
			case "fail":
				failed = true
				flush(w, p, true)
				delete(pkgs, e.Package)
			}
			continue
		}
		switch e.Action {
		case "output":
			if !framing(e.Output) {
				p.tests[e.Test] = append(p.tests[e.Test], e.Output)
			}
		case "fail":
			p.failed = append(p.failed, "--- FAIL: "+e.Test+"\n")
			p.failed = append(p.failed, p.tests[e.Test]...)
			delete(p.tests, e.Test)
		case "skip":
			p.skipped = append(p.skipped, skipLine(e.Test, p.tests[e.Test]))
			delete(p.tests, e.Test)
		case "pass":
			delete(p.tests, e.Test)
		}
	}
	for _, p := range pkgs { // the stream ended early (the command was killed)
		flush(w, p, true)
	}
	return failed
}

// framing says whether a test's output line is test2json's framing (the
// run, pause, continue and result lines) rather than what the test logged.
func framing(s string) bool {
	t := strings.TrimLeft(s, " ")
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- FAIL", "--- SKIP"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// skipLine is "    SKIP TestName: reason" from a skipped test's output
// ("    file_test.go:12: reason"); the file and line are dropped.
func skipLine(test string, out []string) string {
	var why []string
	for _, l := range out {
		l = strings.TrimSpace(l)
		if i := strings.Index(l, ".go:"); i > 0 && !strings.Contains(l[:i], " ") {
			if j := strings.Index(l[i+4:], ": "); j >= 0 {
				l = l[i+4+j+2:]
			}
		}
		if l != "" {
			why = append(why, l)
		}
	}
	if len(why) == 0 {
		return "    SKIP " + test + "\n"
	}
	return "    SKIP " + test + ": " + strings.Join(why, " / ") + "\n"
}

// flush prints a finished package: its failures and own lines when it
// failed, else its summary line; then its skips.
func flush(w io.Writer, p *pkg, fail bool) {
	if fail {
		for _, l := range p.failed {
			fmt.Fprint(w, l)
		}
		for _, out := range p.tests { // tests cut short by a panic or time-out
			for _, l := range out {
				fmt.Fprint(w, l)
			}
		}
		for _, l := range p.own {
			fmt.Fprint(w, l)
		}
	} else {
		for _, l := range p.own {
			if l != "PASS\n" {
				fmt.Fprint(w, l)
			}
		}
	}
	for _, l := range p.skipped {
		fmt.Fprint(w, l)
	}
}
