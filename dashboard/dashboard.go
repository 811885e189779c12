package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
)

// Config configures a dashboard.
type Config struct {
	// Keys are the credentials of the principals the dashboard may act as
	// (the admin's admin.nk, users' users/<name>.nk): the operator's grant.
	Keys signing.CredsDir
	// AdminKey is the trust anchor: answers count only when signed by the
	// bank or a broker the admin sealed. Empty believes any answer.
	AdminKey string
	// Connect opens a NATS connection as signer (the daemons' way).
	Connect func(name string, signer *signing.Signer) (*nats.Conn, error)
	// Period is how often a signed-in principal's view asks the market;
	// default 1s.
	Period time.Duration
	// History is how far back the charts reach; default 30 minutes.
	History time.Duration
	// Warm are principals whose views start with the dashboard, so their
	// charts begin then (up: the admin); others start at their first
	// sign-in.
	Warm []rpc.As
	// Hosts are host names (beside IP literals and localhost) a request may
	// name in its Host header; any other is refused, so a page of another
	// site cannot reach the dashboard through a rebound DNS name.
	Hosts []string
	// Logger hears sign-ins and the views' failures; nil discards.
	Logger *slog.Logger
}

const (
	defaultPeriod  = time.Second
	defaultHistory = 30 * time.Minute
	// sessionTTL bounds a browser session from its sign-in.
	sessionTTL = 12 * time.Hour
	// viewIdle stops a view that no page has asked for this long.
	viewIdle   = 5 * time.Minute
	cookieName = "mrm_dashboard"
	// maxSessions bounds the sessions kept: a sign-in beyond it forgets
	// the oldest.
	maxSessions = 1000
)

// Dashboard serves the pages. It is an http.Handler for every path.
type Dashboard struct {
	cfg    Config
	mux    *http.ServeMux
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	logins logins
	prices priceHistory

	mu       sync.Mutex
	sessions map[string]session
	views    map[rpc.As]*view
}

// session is one signed-in browser.
type session struct {
	who     rpc.As
	created time.Time
}

// New makes a dashboard and starts the Warm principals' views.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Connect == nil {
		return nil, errors.New("dashboard: Connect is required")
	}
	if cfg.Period <= 0 {
		cfg.Period = defaultPeriod
	}
	if cfg.History <= 0 {
		cfg.History = defaultHistory
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dashboard{cfg: cfg, ctx: ctx, cancel: cancel, sessions: map[string]session{}, views: map[rpc.As]*view{},
		prices: priceHistory{window: cfg.History}}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	d.mux = http.NewServeMux()
	d.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	d.mux.HandleFunc("GET /{$}", d.page)
	d.mux.HandleFunc("GET /login", d.login)
	d.mux.HandleFunc("POST /logout", d.logout)
	d.mux.HandleFunc("GET /live", d.live)
	d.mux.HandleFunc("GET /state.json", d.state)
	for _, who := range cfg.Warm {
		if err := checkPrincipal(who); err != nil {
			return nil, err
		}
		d.view(who, true)
	}
	return d, nil
}

// Close ends every live stream and view; the pages answer nothing after.
func (d *Dashboard) Close() {
	d.cancel()
	d.wg.Wait()
}

// Healthy reports whether every view is connected.
func (d *Dashboard) Healthy() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var bad []string
	for who, v := range d.views {
		if err := v.healthy(); err != nil {
			bad = append(bad, who.Name+": "+err.Error())
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// LoginLink is a one-time sign-in link for who at base, signed with the key
// the dashboard holds for who (up prints the admin's).
func (d *Dashboard) LoginLink(base string, who rpc.As) (string, error) {
	s, err := d.cfg.Keys.Signer(who.Role, who.Name)
	if err != nil {
		return "", err
	}
	tok, err := LoginToken(s, who)
	if err != nil {
		return "", err
	}
	return LoginLink(base, tok), nil
}

// ServeHTTP answers every request with the security headers, after
// checking its Host.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "+
		"base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if !d.allowedHost(r.Host) {
		http.Error(w, "dashboard: unknown Host "+r.Host+" (open it by IP address or localhost)", http.StatusMisdirectedRequest)
		return
	}
	d.mux.ServeHTTP(w, r)
}

// allowedHost: an IP literal, localhost, or a configured name.
func (d *Dashboard) allowedHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") {
		return true
	}
	for _, h := range d.cfg.Hosts {
		if strings.EqualFold(host, h) {
			return true
		}
	}
	return false
}

// signedIn is the request's session, if it has a live one.
func (d *Dashboard) signedIn(r *http.Request) (rpc.As, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return rpc.As{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sessions[c.Value]
	if !ok || time.Since(s.created) > sessionTTL {
		delete(d.sessions, c.Value)
		return rpc.As{}, false
	}
	return s.who, true
}

// login signs a browser in with a token and sends it to the dashboard. It
// answers with a page that moves on to / itself rather than a redirect: a
// SameSite=Strict cookie set in a redirect chain that a link in another
// site started is not sent on its next hop.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	who, err := d.logins.check(r.URL.Query().Get("t"), d.cfg.Keys, time.Now())
	if err != nil {
		d.cfg.Logger.Warn("dashboard sign-in refused", "err", err, "from", r.RemoteAddr)
		d.render(w, http.StatusForbidden, "signin", signinPage{Refused: err.Error(), Base: base(r)})
		return
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	d.mu.Lock()
	d.forgetSessions()
	d.sessions[id] = session{who: who, created: time.Now()}
	d.mu.Unlock()
	d.view(who, false)
	d.cfg.Logger.Info("dashboard sign-in", "role", who.Role, "name", who.Name, "from", r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: int(sessionTTL / time.Second)})
	d.render(w, http.StatusOK, "signed-in", who)
}

// forgetSessions drops expired sessions, and the oldest beyond
// maxSessions. d.mu is held.
func (d *Dashboard) forgetSessions() {
	var oldest string
	for id, s := range d.sessions {
		if time.Since(s.created) > sessionTTL {
			delete(d.sessions, id)
		} else if oldest == "" || s.created.Before(d.sessions[oldest].created) {
			oldest = id
		}
	}
	if len(d.sessions) >= maxSessions {
		delete(d.sessions, oldest)
	}
}

// logout ends the session. Only a form of the dashboard's own pages may
// (Sec-Fetch-Site, else Origin): the cookie is SameSite=Strict anyway.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "dashboard: cross-site request refused", http.StatusForbidden)
		return
	}
	if c, err := r.Cookie(cookieName); err == nil {
		d.mu.Lock()
		delete(d.sessions, c.Value)
		d.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// base is the dashboard's address as r reached it.
func base(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// sameOrigin reports whether a browser says r comes from the dashboard's
// own pages.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := r.Header.Get("Origin")
	return origin == "" || strings.TrimPrefix(strings.TrimPrefix(origin, "http://"), "https://") == r.Host
}

// page is the dashboard of the session's principal, or the sign-in page.
func (d *Dashboard) page(w http.ResponseWriter, r *http.Request) {
	who, ok := d.signedIn(r)
	if !ok {
		d.render(w, http.StatusOK, "signin", signinPage{Base: base(r)})
		return
	}
	v := d.view(who, false)
	select { // the first page shows figures, not a blank frame, when the market answers soon
	case <-v.ready:
	case <-time.After(3 * time.Second):
	case <-r.Context().Done():
		return
	}
	d.render(w, http.StatusOK, "page", v.current())
}

// state is the session's latest snapshot as JSON: what the page shows, for
// scripts and tests.
func (d *Dashboard) state(w http.ResponseWriter, r *http.Request) {
	who, ok := d.signedIn(r)
	if !ok {
		http.Error(w, "dashboard: sign in first (mrmarket dashboard login)", http.StatusUnauthorized)
		return
	}
	v := d.view(who, false)
	select {
	case <-v.ready:
	case <-time.After(3 * time.Second):
	case <-r.Context().Done():
		return
	}
	writeJSON(w, v.current().Snapshot)
}

// live streams the session's page sections as server-sent events: every
// section once at the start, then each that changed, as the view sees the
// market change.
func (d *Dashboard) live(w http.ResponseWriter, r *http.Request) {
	who, ok := d.signedIn(r)
	if !ok {
		http.Error(w, "dashboard: signed out", http.StatusUnauthorized)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "dashboard: streaming unsupported", http.StatusInternalServerError)
		return
	}
	v := d.view(who, false)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	sent := map[string]string{}
	heartbeat := time.NewTicker(15 * time.Second)
	defer heartbeat.Stop()
	for {
		cur, changed := v.watch()
		if _, signed := d.signedIn(r); !signed {
			fmt.Fprint(w, "event: signedout\ndata: {}\n\n")
			fl.Flush()
			return
		}
		if err := writeSections(w, cur, sent); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-changed:
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-r.Context().Done():
			return
		case <-d.ctx.Done():
			return
		}
	}
}

// view is who's view, started if it is not running. A warm view never
// stops for want of pages.
func (d *Dashboard) view(who rpc.As, warm bool) *view {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.views[who]
	if !ok || v.stopped() {
		v = newView(d, who, warm)
		d.views[who] = v
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			v.run(d.ctx)
		}()
	}
	v.touch()
	return v
}
