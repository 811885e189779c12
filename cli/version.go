package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// Build is what the binary was built from, as the Go toolchain recorded it
// (runtime/debug.ReadBuildInfo): `mrmarket version`.
type Build struct {
	Module     string `json:"module"`
	Version    string `json:"version"` // the module version: v1.2.3, or (devel) in a checkout
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified,omitempty"` // built from a working tree with uncommitted changes
	Go         string `json:"go"`
}

// buildInfo reads the binary's build information.
func buildInfo() Build {
	b := Build{Module: "github.com/mrmarket/mrmarket", Version: "(devel)", Go: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if info.Main.Path != "" {
		b.Module = info.Main.Path
	}
	if info.Main.Version != "" {
		b.Version = info.Main.Version
	}
	if info.GoVersion != "" {
		b.Go = info.GoVersion
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.CommitTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the one line `mrmarket version` and `mrmarket --version`
// print: mrmarket v1.2.3 (commit 16e40d2, 2026-11-23T17:00:00Z, modified) go1.26.8.
func (b Build) String() string {
	var vcs []string
	if b.Commit != "" {
		vcs = append(vcs, "commit "+b.Commit[:min(len(b.Commit), 12)])
	}
	if b.CommitTime != "" {
		vcs = append(vcs, b.CommitTime)
	}
	if b.Modified {
		vcs = append(vcs, "modified")
	}
	s := "mrmarket " + b.Version
	if len(vcs) > 0 {
		s += " (" + strings.Join(vcs, ", ") + ")"
	}
	return s + " " + b.Go
}

func versionCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "version",
		Usage:     "print the module version, the commit it was built from and the Go version",
		UsageText: "mrmarket version [--json]",
		Flags:     []ucli.Flag{flagJSON()},
		Action: func(c *ucli.Context) error {
			return show(c, buildInfo(), func(o *out, b Build) error {
				_, err := fmt.Fprintln(o, b)
				return err
			})
		},
	}
}
