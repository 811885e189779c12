package dashboard_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/dashboard"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestEachSeesWhatTheMarketShowsThem: the admin's view has every plan and
// VM, the ledger and the audit stream; bob's has his own plans, his VMs
// and of alice's only the per-host aggregate, his balance, and the
// market's refusal of the audit stream — the market's answers to requests
// signed with each key, the same requests for every user.
func TestEachSeesWhatTheMarketShowsThem(t *testing.T) {
	l := startLive(t)
	l.mrmarket(t, "bank", "grant", "--user", "alice", "--amount", "100")
	l.mrmarket(t, "bank", "grant", "--user", "bob", "--amount", "100")
	l.mrmarket(t, "spend", "--user", "alice", "--budget", "20", "--duration", "10m", "--vm", "h1-vm1,h2-vm1", "--id", "alice-web")
	l.mrmarket(t, "spend", "--user", "bob", "--budget", "10", "--duration", "10m", "--vm", "h1-vm2", "--id", "bob-web")

	asAdmin, asBob := l.session(t, admin), l.session(t, bob)
	plans := func(s dashboard.Snapshot) (ids []string) {
		for _, p := range s.Plans {
			ids = append(ids, p.User+"/"+p.ID)
		}
		slices.Sort(ids)
		return ids
	}
	a := l.waitState(t, asAdmin, 5*time.Second, func(s dashboard.Snapshot) bool { return len(s.Plans) == 2 && len(s.Events) >= 4 })
	if got := plans(a); !slices.Equal(got, []string{"alice/alice-web", "bob/bob-web"}) {
		t.Errorf("admin's plans: %v", got)
	}
	if a.Who.Role != wire.RoleAdmin || a.Ledger == nil || len(a.Ledger.Violations) > 0 || len(a.VMs.VMs) != 4 || len(a.VMs.Others) != 0 {
		t.Errorf("admin's view: who %+v, ledger %+v, %d VMs, others %+v", a.Who, a.Ledger, len(a.VMs.VMs), a.VMs.Others)
	}
	if len(a.Events) < 4 || a.EventsRefused != "" {
		t.Errorf("admin's audit stream: %d events, refused %q", len(a.Events), a.EventsRefused)
	}

	b := l.waitState(t, asBob, 5*time.Second, func(s dashboard.Snapshot) bool { return s.EventsRefused != "" && len(s.Plans) > 0 })
	if got := plans(b); !slices.Equal(got, []string{"bob/bob-web"}) {
		t.Errorf("bob's plans: %v, want his own only", got)
	}
	for _, v := range b.VMs.VMs {
		if v.Owner != "bob" {
			t.Errorf("bob sees %s's VM %s", v.Owner, v.VM)
		}
	}
	if len(b.VMs.VMs) != 2 || len(b.VMs.Others) != 2 {
		t.Errorf("bob's VMs: %d own, others %+v; want 2 and a row per host", len(b.VMs.VMs), b.VMs.Others)
	}
	if b.Balance == nil || b.Balance.User != "bob" || b.Ledger != nil || len(b.Holds) != 0 || len(b.Events) != 0 {
		t.Errorf("bob's money: balance %+v, ledger %v, open holds %d, events %d", b.Balance, b.Ledger, len(b.Holds), len(b.Events))
	}
	if !strings.Contains(strings.ToLower(b.EventsRefused), "permissions violation") {
		t.Errorf("bob's audit stream: %q, want the NATS server's refusal", b.EventsRefused)
	}
	page := get(t, asBob, l.url+"/")
	if strings.Contains(page, "alice") {
		t.Errorf("bob's page names alice:\n%s", page)
	}
}

func get(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSignIn: a link signs in once, within its time, when it is signed
// by the key the dashboard holds for the principal it names; the session
// is an HttpOnly, SameSite=Strict cookie; signing out ends it.
func TestSignIn(t *testing.T) {
	l := startLive(t)
	keys := l.keys
	sign := func(role, name string, by *signing.Signer) string {
		t.Helper()
		tok, err := dashboard.LoginToken(by, asOf(role, name))
		if err != nil {
			t.Fatal(err)
		}
		return dashboard.LoginLink(l.url, tok)
	}
	signer := func(role, name string) *signing.Signer {
		t.Helper()
		s, err := keys.Signer(role, name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	visit := func(u string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	good := l.link(t, alice)
	resp, _ := visit(good)
	cookie := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusOK || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("sign-in: %s, cookie %q", resp.Status, cookie)
	}
	for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
	stranger, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	tok := func(link string) string {
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		return u.Query().Get("t")
	}
	tampered := []byte(tok(good))
	tampered[len(tampered)/2] ^= 1
	for _, c := range []struct{ what, link, why string }{
		{"the same link again", good, "used already"},
		{"alice's name signed by bob's key", sign(wire.RoleUser, "alice", signer(wire.RoleUser, "bob")), "holds for alice"},
		{"a key the market never saw", sign(wire.RoleUser, "alice", stranger), "holds for alice"},
		{"the admin's name signed by alice", sign(wire.RoleAdmin, "admin", signer(wire.RoleUser, "alice")), "holds for admin"},
		{"a user the dashboard holds no key of", sign(wire.RoleUser, "carol", stranger), "holds no key"},
		{"an agent's key, as an agent", rawLink(t, l, signer(wire.RoleAgent, "host-1"), `{"role":"agent","name":"host-1"}`), "does not sign in"},
		{"an agent's key, as a user", rawLink(t, l, signer(wire.RoleAgent, "host-1"), `{"role":"user","name":"host-1"}`), "holds no key"},
		{"a link with more than a name", rawLink(t, l, signer(wire.RoleUser, "alice"), `{"role":"user","name":"alice","admin":true}`), "unknown field"},
		{"a tampered token", dashboard.LoginLink(l.url, string(tampered)), "sign-in"},
		{"no token", l.url + "/login", "not a sign-in token"},
	} {
		resp, body := visit(c.link)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Set-Cookie") != "" || !strings.Contains(body, c.why) {
			t.Errorf("%s: %s, cookie %q, want 403 saying %q:\n%s", c.what, resp.Status, resp.Header.Get("Set-Cookie"), c.why, body)
		}
	}

	// Signed in: the page; signed out by a form of another site: refused.
	c := l.session(t, bob)
	if page := get(t, c, l.url+"/"); !strings.Contains(page, "Signed in as <strong>bob</strong>") {
		t.Fatalf("bob's page:\n%s", page)
	}
	req, _ := http.NewRequest(http.MethodPost, l.url+"/logout", nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-site sign-out: %v %v", resp, err)
	}
	if resp, err := c.Get(l.url + "/state.json"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after a refused sign-out: %v %v", resp, err)
	}
	req, _ = http.NewRequest(http.MethodPost, l.url+"/logout", nil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("sign-out: %v %v", resp, err)
	}
	if resp, err := c.Get(l.url + "/state.json"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("after signing out: %v %v", resp, err)
	}

	// A name the request's Host gives that is not this machine's: refused.
	req, _ = http.NewRequest(http.MethodGet, l.url+"/", nil)
	req.Host = "rebound.example.org"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("a rebound Host: %v %v", resp, err)
	}
}

// rawLink is a link whose token s signs over body, as LoginToken would
// not make it.
func rawLink(t *testing.T, l *live, s *signing.Signer, body string) string {
	t.Helper()
	m, err := s.Sign(dashboard.LoginSubject, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := signing.SignedRequestOf(m.Subject, m.Header, m.Data)
	raw, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return dashboard.LoginLink(l.url, base64.RawURLEncoding.EncodeToString(raw))
}

func asOf(role, name string) rpc.As { return rpc.As{Role: role, Name: name} }

// TestDashboardCommand: `mrmarket dashboard --nats …` serves the market up
// runs, acting as the principals whose keys are in up's credentials: alice,
// signed in with her link, sees her plan and not bob's. Its output is no
// terminal, so it prints no admin link.
func TestDashboardCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a market (go test -short skips it)")
	}
	up, _ := startUp(t)
	up.mrmarket(t, "bank", "grant", "--user", "alice", "--amount", "100")
	up.mrmarket(t, "bank", "grant", "--user", "bob", "--amount", "100")
	up.mrmarket(t, "spend", "--user", "alice", "--budget", "20", "--duration", "10m", "--vm", "h1-vm1", "--id", "alice-web")
	up.mrmarket(t, "spend", "--user", "bob", "--budget", "10", "--duration", "10m", "--vm", "h1-vm2", "--id", "bob-web")

	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	out := runDaemon(t, "mrmarket dashboard on http://", "dashboard", "--nats", up.nats, "--creds", string(up.keys), "--listen", addr)
	if strings.Contains(out.String(), "/login?t=") {
		t.Errorf("mrmarket dashboard printed a sign-in link to what is not a terminal:\n%s", out)
	}
	if !strings.Contains(out.String(), "acting as: admin, alice, bob") {
		t.Errorf("mrmarket dashboard does not say whom it acts as:\n%s", out)
	}
	l := &live{nats: up.nats, keys: up.keys, url: "http://" + addr}
	s := l.waitState(t, l.session(t, alice), 5*time.Second, func(s dashboard.Snapshot) bool { return len(s.Plans) > 0 && len(s.Hosts) == 2 })
	var plans []string
	for _, p := range s.Plans {
		plans = append(plans, p.User+"/"+p.ID)
	}
	if !slices.Equal(plans, []string{"alice/alice-web"}) || len(s.Hosts) != 2 || s.Balance == nil || s.Balance.User != "alice" {
		t.Errorf("alice's view through mrmarket dashboard: plans %v, %d hosts, balance %+v", plans, len(s.Hosts), s.Balance)
	}
	if page := get(t, http.DefaultClient, l.url+"/healthz"); strings.TrimSpace(page) != "ok" {
		t.Errorf("mrmarket dashboard's /healthz: %q", page)
	}
}
