package experiments

import (
	"embed"
	"fmt"
	"strings"
	"text/template"
)

// What an experiment says about itself beyond its numbers — the paper's
// setting, the decisions where the paper is silent, what was measured on
// the way to them — is prose for the results page, kept apart from the
// code in notes/*.md and embedded so that `mrmarket sim` needs no files.
//
//go:embed notes/*.md
var notesFS embed.FS

// notesItems are the list items of notes/file: an item starts with "- "
// at the line's start and goes on in lines indented by two spaces, joined
// with one space; headings, prose and blank lines end it and are skipped.
// Each item follows the heading ("## x") above it, "" before any.
func notesItems(file string) []notesItem {
	b, err := notesFS.ReadFile("notes/" + file)
	if err != nil {
		panic(fmt.Sprintf("experiments: %v", err))
	}
	var items []notesItem
	heading, open := "", false
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "- "):
			items = append(items, notesItem{heading, line[2:]})
			open = true
		case open && strings.HasPrefix(line, "  ") && strings.TrimSpace(line) != "":
			items[len(items)-1].text += " " + strings.TrimSpace(line)
		default:
			open = false
			if h, ok := strings.CutPrefix(line, "## "); ok {
				heading = h
			}
		}
	}
	return items
}

// notesItem is one list item of a notes file and the heading it is under.
type notesItem struct{ heading, text string }

// notes are the notes of notes/name.md, each item a text/template over
// data; a key a note names that data lacks is a bug, and panics.
func notes(name string, data map[string]any) []string {
	var out []string
	for _, it := range notesItems(name + ".md") {
		t, err := template.New(name).Option("missingkey=error").Parse(it.text)
		if err != nil {
			panic(fmt.Sprintf("experiments: notes/%s.md: %v", name, err))
		}
		var b strings.Builder
		if err := t.Execute(&b, data); err != nil {
			panic(fmt.Sprintf("experiments: notes/%s.md: %v", name, err))
		}
		out = append(out, b.String())
	}
	return out
}
