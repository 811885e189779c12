package experiments

import (
	"io/fs"
	"strings"
	"testing"
	"text/template"
)

// TestNotesFilesParse: every notes file has items and each parses as a
// template, so that a broken one fails here, not in the run that prints it.
func TestNotesFilesParse(t *testing.T) {
	files, err := fs.Glob(notesFS, "notes/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("notes files: %v %v", files, err)
	}
	for _, f := range files {
		items := notesItems(strings.TrimPrefix(f, "notes/"))
		if len(items) == 0 {
			t.Errorf("%s: no notes", f)
		}
		for _, it := range items {
			if _, err := template.New(f).Parse(it.text); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
}

// TestNotesItems: an item goes on in its indented lines, joined by one
// space, and ends at anything else; each keeps the heading above it.
func TestNotesItems(t *testing.T) {
	items := notesItems("conclusions.md")
	if items[0].heading != "" || items[len(items)-1].heading != Conclusions[len(Conclusions)-1].Experiment {
		t.Fatalf("headings: first %q, last %q", items[0].heading, items[len(items)-1].heading)
	}
	for _, it := range items {
		if strings.Contains(it.text, "\n") || strings.Contains(it.text, "  ") {
			t.Errorf("item not joined by single spaces: %q", it.text)
		}
	}
}
