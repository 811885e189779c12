package bank_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// served is a bank served on an embedded NATS server with a few identities.
type served struct {
	b      *bank.Bank
	nc     *nats.Conn
	keys   signing.CredsDir
	target string
	clock  *time.Time
	stop   func() // stops serving (also at the test's end)
}

func serveBank(t testing.TB, target string) *served {
	t.Helper()
	b, clock := openBank(t, target)
	_, nc := natstest.Start(t)
	stop, err := bank.Serve(nc, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	s := &served{b: b, nc: nc, keys: signing.CredsDir(filepath.Join(t.TempDir(), "creds")), target: target, clock: clock, stop: stop}
	for _, p := range []struct{ role, name string }{
		{wire.RoleAdmin, "admin"}, {wire.RoleBroker, "broker"}, {wire.RoleAgent, "host-1"}, {wire.RoleAgent, "host-2"},
		{wire.RoleUser, "alice"}, {wire.RoleUser, "bob"}, {wire.RoleUser, "carol"},
	} {
		k, err := s.keys.Ensure(p.role, p.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: k.Public(), Name: p.name, Role: p.role}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *served) signer(t *testing.T, role, name string) *signing.Signer {
	t.Helper()
	k, err := s.keys.Signer(role, name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// dump is every ledger table, row by row, as text: "byte-for-byte unchanged"
// compares two dumps. Nonces are not the ledger and are left out.
func dump(t *testing.T, target string) string {
	t.Helper()
	db := openSQL(t, target)
	defer db.Close()
	var out strings.Builder
	for _, table := range []string{"accounts", "transfers", "holds", "captures", "capture_legs", "principals", "income"} {
		rows, err := db.Query(`SELECT * FROM ` + table + ` ORDER BY 1, 2`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		fmt.Fprintf(&out, "-- %s\n", table)
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&out, vals...)
		}
		rows.Close()
	}
	return out.String()
}

// openSQL opens target's database directly, past the bank.
func openSQL(t *testing.T, target string) *sql.DB {
	t.Helper()
	driver, dsn := "pgx", target
	if strings.HasPrefix(target, "sqlite:") {
		driver, dsn = "sqlite", "file:"+strings.TrimPrefix(target, "sqlite:")
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// send sends a prepared message and decodes the reply.
func (s *served) send(msg *nats.Msg, res any) error {
	reply, err := s.nc.RequestMsg(msg, rpc.DefaultTimeout)
	if err != nil {
		return err
	}
	return wire.DecodeReply(reply.Data, res)
}

func (s *served) signed(t *testing.T, signer *signing.Signer, subject string, req any) *nats.Msg {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	m, err := signer.Sign(subject, body)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBadRequestsOverNATS: every kind of bad, unsigned, forged, replayed,
// stale or unauthorised request gets its specific error, and the ledger is
// byte-for-byte unchanged.
func TestBadRequestsOverNATS(t *testing.T) { eachStore(t, testBadRequestsOverNATS) }

func testBadRequestsOverNATS(t *testing.T, target string) {
	ctx := context.Background()
	s := serveBank(t, target)
	admin := bank.Client{NC: s.nc, Keys: s.keys}
	for _, u := range []string{"alice", "bob"} {
		if _, err := admin.Grant(ctx, &wire.GrantRequest{ID: "g-" + u, User: u, Amount: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	users := bank.Client{NC: s.nc, Keys: s.keys}
	if _, err := users.Hold(ctx, &wire.HoldRequest{ID: "h-bob", User: "bob", Amount: 100, Expires: t0.Add(time.Hour), Hosts: []string{"host-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := users.Hold(ctx, &wire.HoldRequest{ID: "h-small", User: "alice", Amount: 10, Expires: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := users.Hold(ctx, &wire.HoldRequest{ID: "h-done", User: "alice", Amount: 10, Expires: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := users.Release(ctx, &wire.ReleaseRequest{Hold: "h-done", User: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := users.Hold(ctx, &wire.HoldRequest{ID: "h-old", User: "alice", Amount: 10, Expires: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	host1 := bank.Client{NC: s.nc, Signer: s.signer(t, wire.RoleAgent, "host-1")}
	if rep, err := host1.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Tick: 1,
		Legs: []wire.CaptureLeg{{ID: "h-small/host-1/v/1", Hold: "h-small", VM: "v", Cumulative: 10}}}); err != nil || rep.Applied != 10 {
		t.Fatalf("capture: %+v %v", rep, err)
	}
	*s.clock = t0.Add(2 * time.Minute) // h-old has expired (no tick has released it)
	replayMsg := s.signed(t, s.signer(t, wire.RoleAdmin, "admin"), wire.BankGrant, &wire.GrantRequest{Versioned: wire.Versioned{V: 1}, ID: "g-replay", User: "carol", Amount: 5})
	if err := s.send(replayMsg, nil); err != nil {
		t.Fatal(err)
	}
	before := dump(t, target)

	alice := s.signer(t, wire.RoleUser, "alice")
	adminKey := s.signer(t, wire.RoleAdmin, "admin")
	stranger, _ := signing.NewUserSigner()
	stale := *adminKey
	stale.Now = func() time.Time { return time.Now().Add(-10 * time.Minute) }
	future := *adminKey
	future.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	grant := func(amount money.Micro) *wire.GrantRequest {
		return &wire.GrantRequest{Versioned: wire.Versioned{V: 1}, ID: "g-new", User: "alice", Amount: amount}
	}
	leg := func(hold string, cum money.Micro) *wire.CaptureBatch {
		return &wire.CaptureBatch{Versioned: wire.Versioned{V: 1}, Host: "host-1", Tick: 9, Legs: []wire.CaptureLeg{{ID: hold + "/host-1/v/9", Hold: hold, VM: "v", Cumulative: cum}}}
	}
	forged := s.signed(t, alice, wire.BankGrant, grant(5))
	forged.Header.Set(signing.HeaderKey, adminKey.Public()) // claims to be the admin
	tampered := s.signed(t, adminKey, wire.BankGrant, grant(5))
	tampered.Data = []byte(strings.Replace(string(tampered.Data), `"amount_micro":5`, `"amount_micro":500`, 1))
	garbage, err := adminKey.Sign(wire.BankGrant, []byte(`{"v":1,"id":`))
	if err != nil {
		t.Fatal(err)
	}
	unsigned := nats.NewMsg(wire.BankGrant)
	unsigned.Data, _ = json.Marshal(grant(5))

	cases := []struct {
		name    string
		msg     *nats.Msg
		want    error
		legCode string // for capture batches: the refused leg's code
	}{
		{"unsigned", unsigned, signing.ErrUnsigned, ""},
		{"forged key", forged, signing.ErrBadSignature, ""},
		{"tampered body", tampered, signing.ErrBadSignature, ""},
		{"replayed", replayMsg, signing.ErrReplay, ""},
		{"stale", s.signed(t, &stale, wire.BankGrant, grant(5)), signing.ErrStale, ""},
		{"from the future", s.signed(t, &future, wire.BankGrant, grant(5)), signing.ErrStale, ""},
		{"unknown key", s.signed(t, stranger, wire.BankGrant, grant(5)), signing.ErrUnknownKey, ""},
		{"user grants", s.signed(t, alice, wire.BankGrant, grant(5)), signing.ErrRole, ""},
		{"zero grant", s.signed(t, adminKey, wire.BankGrant, grant(0)), wire.ErrBadRequest, ""},
		{"negative grant", s.signed(t, adminKey, wire.BankGrant, grant(-5)), wire.ErrBadRequest, ""},
		{"overflowing grant", s.signed(t, adminKey, wire.BankGrant, grant(money.Max+1)), wire.ErrBadRequest, ""},
		{"garbage", garbage, wire.ErrBadRequest, ""},
		{"hold another's money", s.signed(t, alice, wire.BankHold, &wire.HoldRequest{Versioned: wire.Versioned{V: 1}, ID: "x", User: "bob", Amount: 5, Expires: t0.Add(time.Hour)}), signing.ErrRole, ""},
		{"hold beyond balance", s.signed(t, alice, wire.BankHold,
			&wire.HoldRequest{Versioned: wire.Versioned{V: 1}, ID: "x", User: "alice", Amount: 10_000, Expires: t0.Add(time.Hour)}), wire.ErrInsufficient, ""},
		{"release another's hold", s.signed(t, alice, wire.BankRelease, &wire.ReleaseRequest{Versioned: wire.Versioned{V: 1}, Hold: "h-bob", User: "bob"}), signing.ErrRole, ""},
		{"release naming oneself", s.signed(t, alice, wire.BankRelease, &wire.ReleaseRequest{Versioned: wire.Versioned{V: 1}, Hold: "h-bob", User: "alice"}), wire.ErrForbidden, ""},
		{"transfer from another", s.signed(t, alice, wire.BankTransfer, &wire.TransferRequest{Versioned: wire.Versioned{V: 1}, ID: "x", From: "bob", To: "alice", Amount: 5}), signing.ErrRole, ""},
		{"transfer to unknown", s.signed(t, alice, wire.BankTransfer, &wire.TransferRequest{Versioned: wire.Versioned{V: 1}, ID: "x", From: "alice", To: "nobody", Amount: 5}), wire.ErrNotFound, ""},
		{"transfer beyond balance", s.signed(t, alice, wire.BankTransfer,
			&wire.TransferRequest{Versioned: wire.Versioned{V: 1}, ID: "x", From: "alice", To: "bob", Amount: 10_000}), wire.ErrInsufficient, ""},
		{"user captures", s.signed(t, alice, wire.BankCapture, leg("h-bob", 5)), signing.ErrRole, ""},
		{"agent captures for another host", s.signed(t, s.signer(t, wire.RoleAgent, "host-2"), wire.BankCapture, leg("h-bob", 5)), signing.ErrRole, ""},
		{"capture unknown hold", s.signed(t, s.signer(t, wire.RoleAgent, "host-1"), wire.BankCapture, leg("h-none", 5)), nil, wire.CodeNotFound},
		{"capture beyond the hold", s.signed(t, s.signer(t, wire.RoleAgent, "host-1"), wire.BankCapture, leg("h-small", 11)), nil, wire.CodeInsufficient},
		{"capture after release", s.signed(t, s.signer(t, wire.RoleAgent, "host-1"), wire.BankCapture, leg("h-done", 5)), nil, wire.CodeConflict},
		{"capture after expiry", s.signed(t, s.signer(t, wire.RoleAgent, "host-1"), wire.BankCapture, leg("h-old", 5)), nil, wire.CodeExpired},
		{"capture as a wrong beneficiary", nil, nil, wire.CodeForbidden},
		{"negative capture", s.signed(t, s.signer(t, wire.RoleAgent, "host-1"), wire.BankCapture, leg("h-bob", -5)), wire.ErrBadRequest, ""},
		{"income by a user", s.signed(t, alice, wire.BankIncome, &wire.IncomeSetRequest{Versioned: wire.Versioned{V: 1}, User: "alice", Amount: 5, Every: wire.Duration(time.Hour)}), signing.ErrRole, ""},
		{"principal by a user", s.signed(t, alice, wire.BankPrincipal,
			&wire.PrincipalRequest{Versioned: wire.Versioned{V: 1}, Key: stranger.Public(), Name: "eve", Role: wire.RoleAdmin}), signing.ErrRole, ""},
	}
	// host-2 may not capture from h-bob (beneficiaries: host-1 only).
	cases[25].msg = s.signed(t, s.signer(t, wire.RoleAgent, "host-2"), wire.BankCapture,
		&wire.CaptureBatch{Versioned: wire.Versioned{V: 1}, Host: "host-2", Tick: 9, Legs: []wire.CaptureLeg{{ID: "h-bob/host-2/v/9", Hold: "h-bob", VM: "v", Cumulative: 5}}})
	for _, c := range cases {
		var rep wire.CaptureReply
		err := s.send(c.msg, &rep)
		switch {
		case c.want != nil && (err == nil || wire.ToError(err).Code != wire.ToError(c.want).Code):
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		case c.want != nil && !strings.Contains(err.Error(), c.want.Error()):
			t.Errorf("%s: message %q lacks %q", c.name, err, c.want)
		case c.want == nil && (err != nil || len(rep.Legs) != 1 || rep.Legs[0].Error == nil || rep.Legs[0].Error.Code != c.legCode):
			t.Errorf("%s: got %+v %v, want the leg refused with %s", c.name, rep, err, c.legCode)
		}
	}
	if after := dump(t, target); after != before {
		t.Fatalf("refused requests changed the ledger:\n--- before\n%s\n--- after\n%s", before, after)
	}
}
