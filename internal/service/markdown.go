package service

import (
	"fmt"
	"io"
	"strings"
)

// Component is a named table, for a listing of several.
type Component struct {
	Name  string // "bank"
	Note  string // a line under its heading; may be empty
	Table Table
}

// WriteMarkdown writes the subjects of every component as Markdown tables
// (docs/SUBJECTS.md): subject, operation, queue group, request type, and
// who may send it, whether a signed one is a replayable read and whether
// it is audited.
func WriteMarkdown(w io.Writer, title, intro string, components ...Component) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s\n", title, strings.TrimSpace(intro))
	for _, c := range components {
		fmt.Fprintf(&b, "\n## %s\n\n", c.Name)
		if c.Note != "" {
			fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(c.Note))
		}
		b.WriteString("| subject | op | queue group | request | signed | roles | audited |\n")
		b.WriteString("|---|---|---|---|---|---|---|\n")
		for _, e := range c.Table.List() {
			queue, signed, roles, audited := "—", "no", "anyone", "—"
			if e.Queue != "" {
				queue = "`" + e.Queue + "`"
			}
			if e.Signed {
				signed, roles = "yes", strings.Join(e.Roles, ", ")
			}
			if e.Replayable {
				signed = "yes, replayable read"
			}
			if e.Audit {
				audited = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | %s | %s | %s |\n", e.Subject, e.Name, queue, e.Request, signed, roles, audited)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
