package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

//go:embed assets
var assets embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"section": func(f frame, id string) template.HTML { return f.Sections[id] },
	"odd":     func(i int) bool { return i%2 == 1 },
}).ParseFS(assets, "assets/templates/*.html"))

// sectionIDs are the page's live parts, each re-rendered and sent whole
// when it changes.
var sectionIDs = []string{"status", "summary", "prices", "hosts", "money-chart", "money", "jobs", "plans", "vms", "events"}

// render writes template name with data.
func (d *Dashboard) render(w http.ResponseWriter, code int, name string, data any) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// signinPage is the sign-in page: how to sign in, and why a link was
// refused.
type signinPage struct{ Refused, Base string }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeSections sends, as one server-sent event, the sections of f that
// differ from what sent says the browser has, and notes them sent.
func writeSections(w io.Writer, f frame, sent map[string]string) error {
	msg := struct {
		At       string            `json:"at"`
		Sections map[string]string `json:"sections"`
	}{At: f.At.UTC().Format("15:04:05") + " UTC", Sections: map[string]string{}}
	for id, html := range f.Sections {
		if sent[id] != string(html) {
			msg.Sections[id] = string(html)
			sent[id] = string(html)
		}
	}
	if len(msg.Sections) == 0 {
		return nil
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: sections\ndata: %s\n\n", data)
	return err
}

// renderSections renders every live section of s, with the view's money
// history h and the hosts' prices.
func renderSections(s Snapshot, h *history, prices map[string][]point) map[string]template.HTML {
	m := newModel(s, h, prices)
	out := make(map[string]template.HTML, len(sectionIDs))
	for _, id := range sectionIDs {
		var b bytes.Buffer
		if err := pages.ExecuteTemplate(&b, "section-"+id, m); err != nil {
			b.Reset()
			fmt.Fprintf(&b, `<p class="problem">%s</p>`, template.HTMLEscapeString(err.Error()))
		}
		out[id] = template.HTML(b.String())
	}
	return out
}

// model is what the sections show, formatted.
type model struct {
	Who           Who
	At            string
	Problems      []string
	KPIs          []kpi
	PriceChart    template.HTML
	PriceLegend   []legendItem
	MoneyChart    template.HTML
	MoneyLegend   []legendItem
	Window        string
	Hosts         []hostRow
	Owners        []legendItem // the colours of the hosts' share bars
	VMs           []vmRow
	Plans         []planRow
	Running       int
	Jobs          []jobRow
	AtRisk        int
	Holds         []holdRow
	Accounts      []accountRow
	Invariant     string
	InvariantOK   bool
	Events        []eventRow
	Captures      string
	EventsRefused string
}

type kpi struct {
	Label, Value, Unit, Note, Tone string
}

type legendItem struct {
	Name, Color, Value, Unit string
}

type hostRow struct {
	Host, Price, Updated string
	VMs, Funded          int
	Retired, Stale       bool
	Shares               template.HTML
}

type vmRow struct {
	Host, VM, Owner, Rate  string
	Others                 bool
	Share, CPU             string
	ShareBar, CPUBar       template.HTML
	Idle                   bool
	Disk, Net              string
	Bids                   []bidRow
	ShareTitle, UsageTitle string
	// Short are the resources its agent found it short of: it wanted
	// more than it got, and got less than its share entitles it to.
	Short []string
}

type bidRow struct{ Plan, Rate string }

type planRow struct {
	ID, User, Strategy, Status, StatusTone string
	Budget, Spent, Released, Held          string
	Estimate                               bool
	Burn                                   template.HTML
	BurnText, TimeLeft                     string
	VMs                                    int
}

type jobRow struct {
	Name, ID, User, Status, StatusTone string
	Deadline, Predicted                string
	Progress                           string
	ProgressBar                        template.HTML
	Risk, RiskTone, RiskWhy            string
	Share, Price, Spent                string
}

type holdRow struct {
	ID, User, Status, Amount, Captured, Released, Remaining, Expires, Memo string
}

type accountRow struct{ ID, Kind, Balance string }

type eventRow struct{ At, Component, Op, Who, What string }

func newModel(s Snapshot, h *history, prices map[string][]point) model {
	now := s.At
	m := model{Who: s.Who, At: s.At.UTC().Format("15:04:05") + " UTC", EventsRefused: s.EventsRefused}
	for _, what := range slices.Sorted(maps.Keys(s.Errors)) {
		m.Problems = append(m.Problems, what+": "+s.Errors[what])
	}
	m.charts(s, h, prices)
	shares := m.shares(s)
	for _, p := range s.Hosts {
		m.Hosts = append(m.Hosts, hostRow{Host: p.Host, Price: fmt.Sprintf("%.2f", perHour(p.Price)), VMs: p.VMs, Funded: p.Funded,
			Updated: ago(now, p.Updated), Retired: p.Retired, Stale: now.Sub(p.Updated) > 15*time.Second, Shares: stacked(shares[p.Host])})
	}
	m.vms(s)
	jobs := map[string]wire.Job{}
	for _, j := range s.Jobs {
		jobs[j.User+"/"+j.ID] = j
		m.Jobs = append(m.Jobs, newJobRow(j, now))
		if r := m.Jobs[len(m.Jobs)-1].Risk; r == riskAtRisk || r == riskLate {
			m.AtRisk++
		}
	}
	for _, p := range s.Plans {
		if p.Status == wire.PlanRunning {
			m.Running++
		}
		m.Plans = append(m.Plans, newPlanRow(p, jobs, now))
	}
	slices.SortStableFunc(m.Plans, func(a, b planRow) int { return strings.Compare(statusOrder[a.Status], statusOrder[b.Status]) })
	m.money(s)
	for _, ev := range s.Events {
		m.Events = append(m.Events, newEventRow(ev))
	}
	m.Captures = captureLine(s.Captures)
	m.KPIs = kpis(s, m)
	return m
}

// statusOrder puts running plans first.
var statusOrder = map[string]string{wire.PlanRunning: "0", "starting": "1"}

// charts draws the price and money charts over the history's window up to
// the snapshot.
func (m *model) charts(s Snapshot, h *history, prices map[string][]point) {
	to := s.At
	from := to.Add(-h.window)
	first := to
	for _, ps := range prices {
		if len(ps) > 0 && ps[0].T.Before(first) {
			first = ps[0].T
		}
	}
	m.Window = fmt.Sprintf("The last %s, a reading every %s.", span(h.window), span(h.period))
	if first.After(from) { // young: the axis spans what there is, a minute at least
		from = first
		m.Window = fmt.Sprintf("Since %s UTC, when the dashboard began: a reading every %s.", first.UTC().Format("15:04:05"), span(h.period))
	}
	if to.Sub(from) < time.Minute {
		from = to.Add(-time.Minute)
	}
	var ps []series
	for i, host := range slices.Sorted(maps.Keys(prices)) {
		c := palette[i%len(palette)]
		pts := upTo(prices[host], to) // another view may have read later than s
		ps = append(ps, series{Name: host, Color: c, Points: pts})
		m.PriceLegend = append(m.PriceLegend, legendItem{Name: host, Color: c, Value: lastValue(pts), Unit: "credits/h"})
	}
	m.PriceChart = chart{Title: "Price of each host over time, credits per hour", Unit: "price (credits/h)", From: from, To: to, Series: ps}.svg()
	names := moneySeries[s.Who.Admin()]
	var ms []series
	for i, name := range names {
		if len(h.money[i]) == 0 {
			continue
		}
		ms = append(ms, series{Name: name, Color: palette[i], Points: h.money[i]})
		m.MoneyLegend = append(m.MoneyLegend, legendItem{Name: name, Color: palette[i], Value: lastValue(h.money[i]), Unit: "credits"})
	}
	title := "Your money over time, credits"
	if s.Who.Admin() {
		title = "The market's money over time, credits"
	}
	// Narrower: the money chart's card is half the page, and its text
	// keeps its size only when the drawing is not scaled down.
	m.MoneyChart = chart{Title: title, Unit: "credits", From: from, To: to, Series: ms, Width: 560}.svg()
}

// upTo is ps up to and including t.
func upTo(ps []point, t time.Time) []point {
	i, _ := slices.BinarySearchFunc(ps, t, func(p point, t time.Time) int {
		if p.T.After(t) {
			return 1
		}
		return -1
	})
	return ps[:i]
}

func lastValue(ps []point) string {
	if len(ps) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", ps[len(ps)-1].V)
}

// ownerPalette colours the hosts' share bars by owner; apart from the
// hosts' colours in the price chart, so neither is read for the other.
var ownerPalette = []string{"#1b7837", "#762a83", "#b35806", "#2166ac", "#8c510a", "#01665e", "#c51b7d"}

// othersColor is the other users' VMs together, in a user's view.
const othersColor = "#8796a5"

// shares are each host's segments, a VM's each (coloured by its owner) or
// the other users' together, as the market showed them.
func (m *model) shares(s Snapshot) map[string][]segment {
	owners := map[string]string{}
	for _, v := range s.VMs.VMs {
		owners[v.Owner] = ""
	}
	for i, o := range slices.Sorted(maps.Keys(owners)) {
		owners[o] = ownerPalette[i%len(ownerPalette)]
		m.Owners = append(m.Owners, legendItem{Name: o, Color: owners[o]})
	}
	out := map[string][]segment{}
	for _, v := range s.VMs.VMs {
		if v.Share > 0 {
			out[v.Host] = append(out[v.Host], segment{Label: v.VM + " (" + v.Owner + ")", Share: v.Share, Color: owners[v.Owner]})
		}
	}
	for _, o := range s.VMs.Others {
		if o.Share > 0 {
			out[o.Host] = append(out[o.Host], segment{Label: "other users", Share: o.Share, Color: othersColor})
		}
	}
	if len(s.VMs.Others) > 0 {
		m.Owners = append(m.Owners, legendItem{Name: "other users", Color: othersColor})
	}
	return out
}

// vms are the VMs as the market showed them: a user's own, and one row
// per host for everyone else's together.
func (m *model) vms(s Snapshot) {
	others := s.VMs.Others
	flush := func(host string) {
		for len(others) > 0 && (host == "" || others[0].Host < host) {
			o := others[0]
			others = others[1:]
			n := "VMs"
			if o.VMs == 1 {
				n = "VM"
			}
			m.VMs = append(m.VMs, vmRow{Host: o.Host, VM: fmt.Sprintf("%d %s", o.VMs, n), Owner: "other users", Others: true,
				Rate: fmt.Sprintf("%.2f", perHour(o.Rate)), Share: pct(o.Share), ShareBar: bar(o.Share, -1, "muted"),
				ShareTitle: "their shares together"})
		}
	}
	for _, v := range s.VMs.VMs {
		flush(v.Host)
		row := vmRow{Host: v.Host, VM: v.VM, Owner: v.Owner, Rate: fmt.Sprintf("%.2f", perHour(v.Rate)),
			Share: pct(v.Share), ShareBar: bar(v.Share, -1, "info"), CPU: pct(v.Util), CPUBar: bar(v.Util, v.Share, "ok"), Idle: v.Idle,
			Disk: delivered(v, wire.ResourceDisk), Net: delivered(v, wire.ResourceNetIn, wire.ResourceNetOut),
			ShareTitle: "its rate over the host's price", UsageTitle: "CPU the VM used over the last tick, as a share of its host; the mark is its share"}
		for _, b := range v.Bids {
			row.Bids = append(row.Bids, bidRow{Plan: b.Plan, Rate: fmt.Sprintf("%.2f", perHour(b.Rate))})
		}
		for _, sh := range v.Short {
			row.Short = append(row.Short, fmt.Sprintf("%s %s of %s for %s", sh.Resource, pct(sh.Delivered), pct(sh.Entitled), span(v.Updated.Sub(sh.Since))))
		}
		m.VMs = append(m.VMs, row)
	}
	flush("")
}

// delivered says how a VM's host delivers its share of a resource: the
// throttle's caps now, the kernel's weights, or nothing — never a share
// nothing enforces.
func delivered(v wire.HostVM, resources ...string) string {
	mode, caps := v.Delivery(resources...)
	switch {
	case mode == wire.ModeWeights:
		return "by weight"
	case mode == wire.ModeThrottle && caps == nil:
		return "throttled"
	case mode == wire.ModeThrottle:
		s := make([]string, len(caps))
		for i, c := range caps {
			s[i] = fmt.Sprintf("%.1f", c)
		}
		return "cap " + strings.Join(s, " / ") + " MiB/s"
	}
	return "not governed"
}

func newPlanRow(p wire.Plan, jobs map[string]wire.Job, now time.Time) planRow {
	r := planRow{ID: p.ID, User: p.User, Strategy: p.Strategy, Status: p.Status, StatusTone: planTone(p.Status),
		Budget: credits(p.Budget), Spent: credits(p.Spent), Released: credits(p.Released), Held: credits(p.Held),
		Estimate: p.Figures == "estimate", VMs: len(p.VMs)}
	if j, ok := jobs[p.User+"/"+p.ID]; ok {
		r.Strategy = "deadline job"
		if j.Deadline.IsZero() {
			r.Strategy = "best-effort job"
		}
	}
	spent := 0.0
	if p.Budget > 0 {
		spent = float64(p.Spent) / float64(p.Budget)
	}
	elapsed := -1.0
	if d := p.End.Sub(p.Start); d > 0 && p.Status == wire.PlanRunning {
		elapsed = min(max(float64(now.Sub(p.Start))/float64(d), 0), 1)
	}
	r.Burn = bar(spent, elapsed, "info")
	r.BurnText = pct(spent) + " spent"
	switch {
	case p.Status == wire.PlanRunning && !p.End.IsZero():
		r.TimeLeft = span(p.End.Sub(now)) + " left"
		if p.End.Before(now) {
			r.TimeLeft = "ending"
		}
	case !p.End.IsZero():
		r.TimeLeft = "ended " + stamp(p.End, now)
	default:
		r.TimeLeft = "-"
	}
	return r
}

func planTone(status string) string {
	switch status {
	case wire.PlanRunning:
		return "ok"
	case wire.PlanFailed:
		return "bad"
	case wire.PlanCancelled:
		return "warn"
	}
	return "neutral"
}

// The risk of a deadline job.
const (
	riskOnTrack = "on track"
	riskTight   = "tight"
	riskAtRisk  = "at risk"
	riskLate    = "late"
	riskMet     = "met"
	riskMissed  = "missed"
	riskNone    = "no deadline"
)

// jobRisk is a job's risk: late (running past its deadline, or the deadline
// service says so), at risk (predicted to finish after it), tight (less
// than a tenth of its admitted time to spare), on track; a finished job met
// or missed its deadline.
func jobRisk(j wire.Job, now time.Time) (risk, tone, why string) {
	switch {
	case j.Deadline.IsZero():
		return riskNone, "neutral", "best effort: runs on what deadline jobs leave"
	case j.Status == wire.JobDone && !j.Finished.After(j.Deadline):
		return riskMet, "ok", "finished " + span(j.Deadline.Sub(j.Finished)) + " before its deadline"
	case j.Status == wire.JobDone:
		return riskMissed, "bad", "finished " + span(j.Finished.Sub(j.Deadline)) + " after its deadline"
	case j.Status == wire.JobLate || now.After(j.Deadline):
		return riskLate, "bad", "past its deadline and not done"
	case j.Predict.After(j.Deadline):
		return riskAtRisk, "bad", "predicted to finish " + span(j.Predict.Sub(j.Deadline)) + " after its deadline"
	}
	slack := j.Deadline.Sub(j.Predict)
	if slack < j.Deadline.Sub(j.Admitted)/10 {
		return riskTight, "warn", span(slack) + " to spare"
	}
	return riskOnTrack, "ok", span(slack) + " to spare"
}

func newJobRow(j wire.Job, now time.Time) jobRow {
	r := jobRow{Name: j.Name, ID: j.ID, User: j.User, Status: j.Status, Deadline: "-", Predicted: stamp(j.Predict, now),
		Progress: pct(j.Progress), ProgressBar: bar(j.Progress, -1, "info"), Share: pct(j.Share), Price: credits(j.Price), Spent: credits(j.Spent)}
	if !j.Deadline.IsZero() {
		r.Deadline = stamp(j.Deadline, now)
	}
	if j.Status == wire.JobDone {
		r.Predicted = "done " + stamp(j.Finished, now)
	}
	r.Risk, r.RiskTone, r.RiskWhy = jobRisk(j, now)
	r.StatusTone = map[string]string{wire.JobRunning: "ok", wire.JobLate: "bad", wire.JobDone: "neutral", wire.JobQueued: "warn"}[j.Status]
	return r
}

// money is the balances and holds: a user's own holds; the admin's ledger
// accounts and every open hold.
func (m *model) money(s Snapshot) {
	now := s.At
	if b := s.Balance; b != nil {
		for _, h := range b.Holds {
			m.Holds = append(m.Holds, holdRow{ID: h.ID, User: h.User, Status: h.Status, Amount: credits(h.Amount), Captured: credits(h.Captured),
				Released: credits(h.Released), Remaining: credits(h.Remaining()), Expires: stamp(h.Expires, now)})
		}
	}
	for _, h := range s.Holds {
		m.Holds = append(m.Holds, holdRow{ID: h.ID, User: h.User, Status: h.Status, Amount: credits(h.Amount), Captured: credits(h.Captured),
			Released: credits(h.Released), Remaining: credits(h.Remaining()), Expires: stamp(h.Expires, now), Memo: h.Memo})
	}
	if l := s.Ledger; l != nil {
		for _, a := range l.Accounts {
			m.Accounts = append(m.Accounts, accountRow{ID: a.ID, Kind: a.Kind, Balance: credits(a.Balance)})
		}
		m.InvariantOK = len(l.Violations) == 0
		m.Invariant = fmt.Sprintf("Σ balances %s + Σ open holds %s = Σ granted %s", credits(l.Balances), credits(l.OpenHolds), credits(l.Granted))
		if !m.InvariantOK {
			m.Invariant = "VIOLATED: " + strings.Join(l.Violations, "; ")
		}
	}
}

// kpis are the figures at the top: a user's own money, or the market's.
func kpis(s Snapshot, m model) []kpi {
	var out []kpi
	if b := s.Balance; b != nil {
		out = append(out,
			kpi{Label: "Balance", Value: credits(b.Balance), Unit: "credits", Note: "yours to spend"},
			kpi{Label: "Held by plans", Value: credits(b.Held), Unit: "credits", Note: "in escrow for running plans"},
			kpi{Label: "Spent", Value: credits(b.Spent), Unit: "credits", Note: "paid to hosts"},
			kpi{Label: "Granted", Value: credits(b.Granted), Unit: "credits", Note: "all budgets received"})
	}
	if l := s.Ledger; l != nil {
		tone, verdict := "ok", "holds"
		if !m.InvariantOK {
			tone, verdict = "bad", "VIOLATED"
		}
		out = append(out,
			kpi{Label: "Granted", Value: credits(l.Granted), Unit: "credits", Note: "all budgets given out"},
			kpi{Label: "Held by plans", Value: credits(l.OpenHolds), Unit: "credits", Note: fmt.Sprintf("%d open holds", len(s.Holds))},
			kpi{Label: "Ledger invariant", Value: verdict, Tone: tone, Note: "Σ balances + Σ open holds = Σ granted"})
	}
	var price float64
	for _, h := range s.Hosts {
		price += perHour(h.Price)
	}
	riskTone := "ok"
	if m.AtRisk > 0 {
		riskTone = "bad"
	}
	return append(out,
		kpi{Label: "Market spending", Value: fmt.Sprintf("%.2f", price), Unit: "credits/h", Note: fmt.Sprintf("Σ prices of %d hosts", len(s.Hosts))},
		kpi{Label: "Plans running", Value: fmt.Sprint(m.Running), Note: fmt.Sprintf("of %d listed", len(s.Plans))},
		kpi{Label: "Jobs at risk", Value: fmt.Sprint(m.AtRisk), Tone: riskTone, Note: fmt.Sprintf("of %d deadline jobs", len(s.Jobs))})
}

// eventFields are the request fields an event's line shows, in order.
var eventFields = []string{"user", "from", "to", "host", "plan", "hold", "name", "role"}

// eventAmounts are the request's amounts, in micro-credits, with their
// labels.
var eventAmounts = [][2]string{{"amount_micro", "amount"}, {"budget_micro", "budget"}, {"more_micro", "more"}, {"less_micro", "less"}}

func newEventRow(ev wire.Event) eventRow {
	r := eventRow{At: ev.At.UTC().Format("15:04:05"), Component: ev.Component, Op: ev.Op, Who: ev.Principal.Name}
	if r.Who == "" {
		r.Who = "(unknown key)"
	} else if ev.Principal.Role != "" {
		r.Who += " (" + ev.Principal.Role + ")"
	}
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(ev.Request.Body))
	dec.UseNumber()
	_ = dec.Decode(&body)
	var parts []string
	for _, f := range eventFields {
		if v, ok := body[f].(string); ok && v != "" {
			parts = append(parts, f+" "+v)
		}
	}
	for _, a := range eventAmounts {
		if n, ok := body[a[0]].(json.Number); ok {
			if v, err := n.Int64(); err == nil {
				parts = append(parts, a[1]+" "+credits(money.Micro(v)))
			}
		}
	}
	if legs, ok := body["legs"].([]any); ok {
		parts = append(parts, fmt.Sprintf("%d legs", len(legs)))
	}
	r.What = strings.Join(parts, " · ")
	return r
}

// captureLine says how many captures each host made in the last minute.
func captureLine(byHost map[string]int) string {
	if len(byHost) == 0 {
		return ""
	}
	total := 0
	var parts []string
	for _, h := range slices.Sorted(maps.Keys(byHost)) {
		total += byHost[h]
		parts = append(parts, fmt.Sprintf("%s %d", h, byHost[h]))
	}
	return fmt.Sprintf("%d in the last minute: %s", total, strings.Join(parts, ", "))
}

// credits is an amount for people: credits to the hundredth.
func credits(m money.Micro) string { return fmt.Sprintf("%.2f", m.Credits()) }

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// stamp is a time of day (UTC), with its date when not today's.
func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	t, now = t.UTC(), now.UTC()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04:05")
	}
	return t.Format("Jan 2 15:04")
}

// ago is how long before now t was.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	return span(d) + " ago"
}

// span is a duration for people: 45s, 8m12s, 8m, 1h5m (to the minute
// past an hour).
func span(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	unit := time.Second
	if d >= time.Hour {
		unit = time.Minute
	}
	s := d.Round(unit).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
