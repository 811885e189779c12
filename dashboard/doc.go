// Package dashboard is mrmarket's web dashboard: what no cluster UI shows —
// host prices moving, budgets burning, who buys which share of which host,
// which deadlines are at risk — live in a browser, as one principal of the
// market sees it. `mrmarket up` serves it beside /metrics; `mrmarket
// dashboard` serves it for a market elsewhere.
//
// # Whose eyes
//
// Every figure is the market's answer to a request signed with the key of
// the principal signed in: the dashboard keeps one NATS connection per
// signed-in principal, authenticated with that principal's NKey, and asks
// through bank.Client and broker.Client with that key as their only
// signer. It asks every user the same questions (plans, jobs and VMs
// with no user named), so what an answer holds is the market's decision —
// a user's own plans, jobs, holds and VMs, and of the others' VMs only a
// row per host — never a filter of the dashboard's. The admin reads the
// ledger and the open holds, which the bank answers only the admin. The
// audit stream is asked for by every principal too, and the NATS server's
// refusal (users have no JetStream) is what a user's page shows.
//
// # Signing in
//
// A browser never holds a key, and no key is typed into a page. The
// dashboard process holds the keys of the principals it may act as — a
// credentials directory its operator gives it (`up`: the market's own) —
// and a browser signs in as one of them with a one-time link:
// `mrmarket dashboard login [--user NAME]`, run where that principal's key
// is, signs a token (the principal, a time, a nonce; over a subject no
// service answers, so a token is no request to the market) and prints the
// link. The dashboard accepts a token once, within LoginTTL of its signing,
// and only when it is signed by the very key it holds for that principal;
// only the admin and users sign in. Holding the key proves the right to
// see what that key sees, so anyone on the machine who can reach the port
// but not the key cannot sign in. `up` prints the admin's link as it
// starts (it holds the admin's key); `mrmarket dashboard` prints it only
// to a terminal, since a service's output is a journal others may read
// while the link is good. docs/SECURITY.md states the same for operators.
//
// A signed-in browser has a session cookie: random, HttpOnly,
// SameSite=Strict, kept in memory for 12 hours. The pages only read;
// the one form (sign out) is refused unless the browser says it comes
// from the dashboard's own page. The sign-in answer is a page that moves
// on by itself, not a redirect, so the Strict cookie is sent on the next
// request even when the link was opened from another site. Every answer
// carries a Content-Security-Policy that admits only the dashboard's own
// script and style (no inline script; the SVG is markup, not script),
// forbids framing, and sends no referrer. A request whose Host is not an
// IP literal, localhost or a configured name is refused, so a page of
// another site cannot reach the dashboard through a DNS name rebound to
// 127.0.0.1. The dashboard listens where it is told: `up` serves it on its
// --http address, 127.0.0.1 by default, and `mrmarket dashboard` on
// 127.0.0.1:9465. It speaks plain HTTP: put it behind TLS before listening
// beyond loopback.
//
// # Live
//
// A principal's view polls the market every Period (1 s) while a page
// wants it, renders each section of the page on the server (html/template;
// charts as SVG, chart.go) and, when a section changed, sends the new
// sections to every open page of that principal as server-sent events
// (/live); the page's one small script puts them in place. A change in
// the market reaches the page within a Period and a round trip. The charts'
// history is kept in memory (History, 30 minutes). A principal's money is
// recorded by their own view, from its start: `up` starts the admin's with
// the market; a user's starts at their first sign-in and stops 5 minutes
// after their last page. The hosts' prices are the one figure every
// principal is told alike (they are public), so the dashboard keeps one
// price history, fed by every view's answers, and a user who signs in
// late sees the prices since the dashboard began.
// /state.json is the session's latest snapshot as JSON.
//
// # Assets
//
// Templates, stylesheet, script and icon are embedded in the binary
// (go:embed); nothing is fetched from elsewhere.
package dashboard
