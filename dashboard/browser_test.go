package dashboard_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mrmarket/mrmarket/dashboard"
)

// The dashboard in a real browser: headless Chromium, driven over the
// DevTools protocol (chromedp), against `mrmarket up` as a person starts
// it. Screenshots go to $MRM_TEST_ARTEFACTS when it is set (kept), else to
// the test's temporary directory; the test prints where.

// chromium is the browser, or the test skips — but not in CI, where
// .ci/run installs it and its absence is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Chromium is not installed (apt-get install chromium): the dashboard's browser test needs it")
	}
	t.Skip("Chromium is not installed (apt-get install chromium): skipping the dashboard's browser test")
	return ""
}

// artefacts is where screenshots go.
func artefacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MRM_TEST_ARTEFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// browser is one headless Chromium with a fresh profile; tab opens a tab
// in a browser context of its own (its own cookies) that records every
// console error and warning, uncaught exception and browser log error.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 1000),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		t.Fatalf("starting Chromium: %v", err)
	}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return &browser{ctx: ctx}
}

func (b *browser) tab(t *testing.T, name string) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	messages := chromedp.Console(ctx)
	read := make(chan struct{})
	go func() {
		defer close(read)
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				b.mu.Lock()
				b.errs = append(b.errs, fmt.Sprintf("%s: %s (%s %s:%d)", name, m, m.Source, m.URL, m.Line+1))
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-read })
	return ctx
}

// consoleErrors are the errors the pages logged so far.
func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// text is the text of the element matching sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {textContent: ""}).textContent`, sel)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitText waits until the element matching sel shows want.
func waitText(t *testing.T, ctx context.Context, sel, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(text(t, ctx, sel), want) {
		if time.Now().After(deadline) {
			t.Errorf("%s does not show %q after %s", sel, want, within)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// signIn opens a one-time link in ctx and waits for the dashboard, live.
func signIn(t *testing.T, ctx context.Context, link string) {
	t.Helper()
	err := chromedp.Do(ctx, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("#summary .kpi")),
		chromedp.WaitReady(chromedp.CSS(`#live[data-state="live"]`)))
	if err != nil {
		t.Fatalf("signing in with %s: %v", link, err)
	}
}

func screenshot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// TestDashboardInABrowser: signed in with the link up prints, the admin's
// page loads with no console error and shows the hosts and users; a spend
// is on it within 2 s; bob's page shows none of alice's plans (nor her
// name) and the hosts' prices from before he signed in; every text stands
// 4.5:1 against its background; the charts and tables are labelled;
// signing out ends the session.
func TestDashboardInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a market and a browser (go test -short skips it)")
	}
	start := time.Now()
	b := newBrowser(t)
	out := artefacts(t)
	l, adminLink := startUp(t)
	l.mrmarket(t, "bank", "grant", "--user", "alice", "--amount", "100")
	l.mrmarket(t, "bank", "grant", "--user", "bob", "--amount", "100")
	l.mrmarket(t, "spend", "--user", "bob", "--budget", "10", "--duration", "10m", "--vm", "h1-vm2,h2-vm2", "--id", "bob-web")
	// The job is priced from the hosts' prices: once bob's bids are on them.
	l.waitState(t, l.session(t, admin), 5*time.Second, func(s dashboard.Snapshot) bool { return len(s.Hosts) > 0 && s.Hosts[0].Price > 0 })
	l.mrmarket(t, "submit", "--user", "alice", "--job", jobFile(t), "--deadline", "45m", "--id", "etl-1")

	adminTab := b.tab(t, "admin")
	signIn(t, adminTab, adminLink)
	for _, want := range []string{"host-1", "host-2", "alice", "bob", "bob-web", "etl"} {
		waitText(t, adminTab, "main", want, 2*time.Second)
	}

	// A spend, from the command line, on the page within 2 s.
	l.mrmarket(t, "spend", "--user", "alice", "--budget", "20", "--duration", "10m", "--vm", "h1-vm1,h2-vm1", "--id", "alice-web")
	spent := time.Now()
	for !strings.Contains(text(t, adminTab, "#plans"), "alice-web") {
		if time.Since(spent) > 2*time.Second {
			t.Fatalf("the spend is not on the page 2 s after it returned:\n%s", text(t, adminTab, "#plans"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the spend was on the admin's page %s after the command returned", time.Since(spent).Round(time.Millisecond))
	// Its bids reach the VMs once the agents have taken them (their next
	// tick, 1 s) and the broker has heard the hosts.
	for !strings.Contains(text(t, adminTab, "#vms"), "alice-web") {
		if time.Since(spent) > 4*time.Second {
			t.Fatalf("alice's bids are not on the VMs 4 s after the spend:\n%s", text(t, adminTab, "#vms"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("its bids were on the VMs %s after", time.Since(spent).Round(time.Millisecond))

	time.Sleep(3 * time.Second) // a few steps of price on the chart
	checkLabels(t, adminTab)
	checkContrast(t, adminTab)
	screenshot(t, adminTab, filepath.Join(out, "dashboard-admin.png"))

	bobTab := b.tab(t, "bob")
	bobSince := time.Now()
	signIn(t, bobTab, l.link(t, bob))
	for _, want := range []string{"bob-web", "other users", "host-1", "refused it to bob"} {
		waitText(t, bobTab, "main", want, 2*time.Second)
	}
	// The hosts' prices are public: bob's chart has them from before he
	// signed in, as the admin's view read them since up started.
	since := regexp.MustCompile(`Since (\d\d:\d\d:\d\d) UTC`).FindStringSubmatch(text(t, bobTab, "#prices"))
	if since == nil || since[1] >= bobSince.UTC().Format("15:04:05") {
		t.Errorf("bob's price chart does not reach back before his sign-in at %s: %q", bobSince.UTC().Format("15:04:05"), text(t, bobTab, "#prices"))
	}
	page := text(t, bobTab, "body")
	for _, never := range []string{"alice", "etl"} {
		if strings.Contains(page, never) {
			t.Errorf("bob's page shows %q:\n%s", never, page)
		}
	}
	html, err := chromedp.Run(bobTab, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, "alice") {
		t.Errorf("bob's page holds alice's name in its markup")
	}
	checkLabels(t, bobTab)
	checkContrast(t, bobTab)
	screenshot(t, bobTab, filepath.Join(out, "dashboard-bob.png"))

	// Signing out: the sign-in page, and the session is gone.
	if err := chromedp.Do(bobTab, chromedp.Click(chromedp.CSS(`header form button`)), chromedp.WaitVisible(chromedp.CSS(`body.signin h1`))); err != nil {
		t.Fatalf("signing out: %v", err)
	}
	checkContrast(t, bobTab)
	screenshot(t, bobTab, filepath.Join(out, "dashboard-signin.png"))
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("the pages logged errors:\n%s", strings.Join(errs, "\n"))
	}
	status, err := chromedp.Run(bobTab, chromedp.Evaluate[int](`fetch('/state.json').then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if status != 401 {
		t.Errorf("state.json after signing out: %d, want 401", status)
	}

	t.Logf("browser test took %s", time.Since(start).Round(time.Millisecond))
}

// checkLabels: the document has a language; every chart names what it
// shows and has both axes labelled with their units; every card has a
// heading; every column has a header; images have alt text; the button
// says what it does.
func checkLabels(t *testing.T, ctx context.Context) {
	t.Helper()
	problems, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
		const p = [];
		if (!document.documentElement.lang) p.push('no lang on <html>');
		document.querySelectorAll('svg.chart').forEach((c, i) => {
			if (!c.getAttribute('aria-label')) p.push('chart ' + i + ' has no aria-label');
			const labels = [...c.querySelectorAll('text.axis-label')].map(e => e.textContent);
			if (!labels.includes('time (UTC)')) p.push('chart ' + i + ' has no time axis label');
			if (!labels.some(l => /\((credits|credits\/h)\)$|^credits$/.test(l))) p.push('chart ' + i + ' has no unit on its value axis: ' + labels);
			if (c.querySelectorAll('text.tick').length < 4) p.push('chart ' + i + ' has too few ticks');
		});
		document.querySelectorAll('section.card').forEach((s, i) => {
			if (!s.querySelector('h1, h2')) p.push('card ' + i + ' has no heading');
		});
		document.querySelectorAll('th[scope=col]').forEach((h) => {
			if (!h.textContent.trim()) p.push('an empty column header');
		});
		document.querySelectorAll('img').forEach((im) => {
			if (!im.hasAttribute('alt')) p.push('an image without alt: ' + im.src);
		});
		document.querySelectorAll('button').forEach((bt) => {
			if (!bt.textContent.trim()) p.push('a button without a label');
		});
		return p;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("labels: %s", p)
	}
}

// checkContrast computes the WCAG 2 contrast ratio of every visible text's
// colour (an SVG text's fill) against the background it is drawn on, as
// the browser computed both, and requires 4.5:1.
func checkContrast(t *testing.T, ctx context.Context) {
	t.Helper()
	type drawn struct {
		Text string `json:"text"`
		FG   string `json:"fg"`
		BG   string `json:"bg"`
	}
	texts, err := chromedp.Run(ctx, chromedp.Evaluate[[]drawn](`(() => {
		const out = [], seen = new Set();
		const clear = (c) => !c || c === 'transparent' || /^rgba\(.*,\s*0\)$/.test(c);
		const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
		while (w.nextNode()) {
			const n = w.currentNode, el = n.parentElement;
			if (!n.textContent.trim() || !el || seen.has(el)) continue;
			seen.add(el);
			if (!el.getClientRects().length) continue;
			const cs = getComputedStyle(el);
			if (cs.visibility === 'hidden' || cs.display === 'none' || el.closest('title')) continue;
			let bg = 'rgb(255, 255, 255)';
			for (let a = el; a; a = a.parentElement) {
				const c = getComputedStyle(a).backgroundColor;
				if (!clear(c)) { bg = c; break; }
			}
			out.push({text: n.textContent.trim().slice(0, 50), fg: el instanceof SVGElement ? cs.fill : cs.color, bg: bg});
		}
		return out;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if len(texts) < 5 {
		t.Fatalf("only %d texts found on the page", len(texts))
	}
	worst, worstText := math.Inf(1), ""
	for _, x := range texts {
		fg, err1 := parseRGB(x.FG)
		bg, err2 := parseRGB(x.BG)
		if err1 != nil || err2 != nil {
			t.Errorf("%q: colours %q on %q: %v %v", x.Text, x.FG, x.BG, err1, err2)
			continue
		}
		r := contrast(fg.over(bg), bg)
		if r < worst {
			worst, worstText = r, x.Text
		}
		if r < 4.5 {
			t.Errorf("%q: %s on %s is %.2f:1, below 4.5:1", x.Text, x.FG, x.BG, r)
		}
	}
	t.Logf("contrast: %d texts, the lowest %.2f:1 (%q)", len(texts), worst, worstText)
}

// rgba is a computed CSS colour.
type rgba struct{ r, g, b, a float64 }

var rgbRE = regexp.MustCompile(`^rgba?\(\s*([\d.]+)[,\s]+([\d.]+)[,\s]+([\d.]+)(?:\s*[,/]\s*([\d.]+%?))?\s*\)$`)

func parseRGB(s string) (rgba, error) {
	m := rgbRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return rgba{}, fmt.Errorf("not an rgb() colour")
	}
	var c rgba
	for i, p := range []*float64{&c.r, &c.g, &c.b} {
		v, err := strconv.ParseFloat(m[i+1], 64)
		if err != nil {
			return rgba{}, err
		}
		*p = v
	}
	c.a = 1
	if m[4] != "" {
		a, err := strconv.ParseFloat(strings.TrimSuffix(m[4], "%"), 64)
		if err != nil {
			return rgba{}, err
		}
		if strings.HasSuffix(m[4], "%") {
			a /= 100
		}
		c.a = a
	}
	return c, nil
}

// over is c drawn over an opaque bg.
func (c rgba) over(bg rgba) rgba {
	return rgba{c.r*c.a + bg.r*(1-c.a), c.g*c.a + bg.g*(1-c.a), c.b*c.a + bg.b*(1-c.a), 1}
}

// luminance is WCAG 2's relative luminance.
func (c rgba) luminance() float64 {
	lin := func(v float64) float64 {
		v /= 255
		if v <= 0.03928 {
			return v / 12.92
		}
		return math.Pow((v+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(c.r) + 0.7152*lin(c.g) + 0.0722*lin(c.b)
}

func contrast(a, b rgba) float64 {
	la, lb := a.luminance(), b.luminance()
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

// TestContrastArithmetic: the ratio the browser test requires, on known
// pairs.
func TestContrastArithmetic(t *testing.T) {
	for _, c := range []struct {
		fg, bg string
		want   float64
	}{
		{"rgb(0, 0, 0)", "rgb(255, 255, 255)", 21},
		{"rgb(255, 255, 255)", "rgb(255, 255, 255)", 1},
		{"rgb(118, 118, 118)", "rgb(255, 255, 255)", 4.54},
		{"rgba(0, 0, 0, 0.5)", "rgb(255, 255, 255)", 3.98},
	} {
		fg, err := parseRGB(c.fg)
		if err != nil {
			t.Fatal(err)
		}
		bg, err := parseRGB(c.bg)
		if err != nil {
			t.Fatal(err)
		}
		if got := contrast(fg.over(bg), bg); math.Abs(got-c.want) > 0.02 {
			t.Errorf("%s on %s: %.3f, want %.2f", c.fg, c.bg, got, c.want)
		}
	}
}
