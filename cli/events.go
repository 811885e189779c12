package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// eventsCommand is `mrmarket events`: the audit stream, MRM_EVENTS.
func eventsCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "events",
		Usage: "show the audit stream: every request that moved money, who signed it and what it did (admin)",
		UsageText: "mrmarket events [--since 1h] [--component bank] [--op grant] [--json]\n" +
			"   mrmarket events --follow",
		Description: "Each event carries the signed request that caused it, as received: with --json it can be\n" +
			"checked by anyone against the signer's public key, without trusting the component that\n" +
			"published it. Reading the stream needs JetStream access, which only the admin has: the events\n" +
			"are every principal's signed requests, and a user is refused them (its own money is in\n" +
			"`plans`, `jobs`, `balance` and `statement`).",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(),
			&ucli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events until interrupted"},
			&ucli.DurationFlag{Name: "since", Usage: "only events of the last DUR (e.g. 1h); default all"},
			&ucli.StringFlag{Name: "component", Usage: "only this component's events: bank or broker"},
			&ucli.StringFlag{Name: "op", Usage: "only this operation's events: grant, hold, capture, spend…"},
		},
		Action: func(c *ucli.Context) error {
			if c.Duration("since") < 0 {
				return badInput("--since must be positive")
			}
			subject, err := eventFilter(c.String("component"), c.String("op"))
			if err != nil {
				return err
			}
			// withClients: a principal NATS does not let read the stream (a
			// user) is refused forbidden at once, not after a time-out.
			return withClients(c, func(cl clients) error {
				js, err := jetstream.New(cl.bank.NC)
				if err != nil {
					return wire.Errorf(wire.ErrUnavailable, "jetstream: %v", err)
				}
				return readEvents(c.Context, js, subject, c.Duration("since"), c.Bool("follow"), func(ev wire.Event) error {
					if c.Bool("json") {
						return json.NewEncoder(c.App.Writer).Encode(ev)
					}
					return printEvent(c.App.Writer, ev)
				})
			})
		},
	}
}

// readEvents hands each event of MRM_EVENTS on subject (the last since of
// them, all when 0) to show, each id once (a publisher may store an event
// again after the stream's duplicate window, see bank/outbox.go); with
// follow it waits for new ones until ctx ends, without it returns once the
// events there were at the start are read.
func readEvents(ctx context.Context, js jetstream.JetStream, subject string, since time.Duration, follow bool, show func(wire.Event) error) error {
	unavailable := func(err error) error {
		return wire.Errorf(wire.ErrUnavailable, "audit stream %s: %v", wire.StreamEvents, err)
	}
	st, err := js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		return unavailable(err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}
	if since > 0 {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, ptr(time.Now().Add(-since))
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return unavailable(err)
	}
	if !follow {
		info, err := cons.Info(ctx)
		if err != nil {
			return unavailable(err)
		}
		if info.NumPending == 0 {
			return nil // nothing to read
		}
	}
	it, err := cons.Messages()
	if err != nil {
		return unavailable(err)
	}
	defer it.Stop()
	go func() { <-ctx.Done(); it.Stop() }()
	shown := map[string]bool{}
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil // interrupted
			}
			return unavailable(err)
		}
		var ev wire.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			ev = wire.Event{Op: "?", Component: "?"} // not ours: still shown, as unreadable
		}
		if ev.ID == "" || !shown[ev.ID] {
			shown[ev.ID] = true
			if err := show(ev); err != nil {
				return err
			}
		}
		meta, err := m.Metadata()
		if !follow && (err != nil || meta.NumPending == 0) {
			return nil
		}
	}
}

func ptr[T any](v T) *T { return &v }

// eventFilter is the subject of the events of component and op ("" for
// any).
func eventFilter(component, op string) (string, error) {
	if component == "" {
		component = "*"
	} else if err := wire.CheckName("component", component); err != nil {
		return "", usageError{err}
	}
	if op == "" {
		op = "*"
	} else if err := wire.CheckName("op", op); err != nil {
		return "", usageError{err}
	}
	return wire.EventSubject(component, op), nil
}

// printEvent is one line: time, component, op, principal, summary.
func printEvent(w io.Writer, ev wire.Event) error {
	who := ev.Principal.Name
	if who == "" {
		who = "(unsigned)"
		if ev.Request.Key != "" {
			who = ev.Request.Key[:8] + "…"
		}
	} else {
		who += " (" + ev.Principal.Role + ")"
	}
	_, err := fmt.Fprintf(w, "%s  %-6s %-9s %-22s %s\n", stamp(ev.At), ev.Component, ev.Op, who, summarize(ev))
	return err
}

// summaryFields are the request fields a summary shows, in this order.
var summaryFields = []string{"id", "user", "from", "to", "host", "plan", "hold", "amount_micro", "budget_micro", "more_micro", "less_micro", "name", "role", "key"}

// summarize shows what the request asked (its id, user, amount…) and, for
// a replayed one, that it changed nothing.
func summarize(ev wire.Event) string {
	var body map[string]any
	d := json.NewDecoder(bytes.NewReader(ev.Request.Body))
	d.UseNumber() // amounts are integers of micro-credits: no 1e+07
	_ = d.Decode(&body)
	var parts []string
	for _, f := range summaryFields {
		if v, ok := body[f]; ok && v != "" {
			parts = append(parts, fmt.Sprintf("%s=%v", f, v))
		}
	}
	if n, ok := body["legs"].([]any); ok {
		parts = append(parts, fmt.Sprintf("legs=%d", len(n)))
	}
	var res map[string]any
	if json.Unmarshal(ev.Result, &res) == nil {
		if r, ok := res["replayed"].(bool); ok && r {
			parts = append(parts, "(replayed: no change)")
		}
	}
	return strings.Join(parts, " ")
}
