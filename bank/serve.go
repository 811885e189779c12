package bank

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Who may do what at the bank (see the package doc, "Principals and
// signatures").
var (
	adminOnly = []service.Allow{service.Role(wire.RoleAdmin)}
	// ownMoney: a user moves only its own money.
	ownMoney = []service.Allow{service.Role(wire.RoleAdmin), service.Own(wire.RoleUser)}
	// ownOrBroker: also the broker, which acts on users' signed spends.
	ownOrBroker = []service.Allow{service.Role(wire.RoleAdmin), service.Own(wire.RoleUser), service.Role(wire.RoleBroker)}
	// brokerOrAdmin: the broker (recovering the plans it lost) and admins.
	brokerOrAdmin = []service.Allow{service.Role(wire.RoleAdmin), service.Role(wire.RoleBroker)}
	// ownHost: a host's provider account is credited by its own agent and
	// nobody else.
	ownHost = []service.Allow{service.Own(wire.RoleAgent)}
	// balanceReaders: a user's balance is read by the user, an admin, and
	// the broker (admission checks that a job's price is affordable).
	balanceReaders = []service.Allow{service.Role(wire.RoleAdmin), service.Own(wire.RoleUser), service.Role(wire.RoleBroker)}
	// accountReaders: an account's statement is read by an admin, the user
	// owning it and, for a provider account, that host's agent.
	accountReaders = []service.Allow{service.Role(wire.RoleAdmin),
		service.OwnAs(wire.RoleUser, UserAccount), service.OwnAs(wire.RoleAgent, ProviderAccount)}
)

// statementAccount is the account a statement reads.
func statementAccount(r *wire.StatementRequest) string {
	if r.User != "" {
		return UserAccount(r.User)
	}
	return r.Account
}

// Endpoints is the bank's table: every subject it answers, in the bank's
// queue group so replicas share the load. Mutating requests must be signed
// by a registered principal whose role allows them, each signature usable
// once, and are audited (every success goes to MRM_EVENTS). Reads are
// signed too, but replayable (no nonce is stored: a replayed read changes
// nothing): a balance by its user, an admin or the broker; a statement by
// an admin, the account's user or, for a provider account, its host's
// agent; the ledger and the registry by an admin only, who alone registers,
// revokes and rotates keys (each with its sealed record). whois stays open:
// every connection is
// a registered principal (NATS authentication), the answer is the
// admin-signed record anyone may verify, and the broker and every agent
// ask it before they can check anything. b may be nil to list the table.
func Endpoints(b *Bank) service.Table {
	q := wire.QueueBank
	signed := func(name, subject, what string, allow []service.Allow) service.Endpoint {
		return service.Endpoint{Name: name, Subject: subject, Queue: q, Signed: true, Allow: allow, What: what, Audit: true}
	}
	read := func(name, subject, what string, allow []service.Allow) service.Endpoint {
		return service.Endpoint{Name: name, Subject: subject, Queue: q, Signed: true, Allow: allow, What: what, Replayable: true}
	}
	open := func(name, subject string) service.Endpoint {
		return service.Endpoint{Name: name, Subject: subject, Queue: q}
	}
	return service.Table{
		service.Op(signed("grant", wire.BankGrant, "grant", adminOnly), nil, b.Grant),
		service.Op(signed("income", wire.BankIncome, "set income", adminOnly), nil, b.SetIncome),
		service.Op(signed("principal", wire.BankPrincipal, "register principals", adminOnly), nil, b.AddPrincipal),
		service.Op(signed("revoke", wire.BankRevoke, "revoke principals", adminOnly), nil, b.RevokePrincipal),
		service.Op(signed("rotate", wire.BankRotate, "rotate principals' keys", adminOnly), nil, b.RotatePrincipal),
		service.Op(read("principals", wire.BankPrincipals, "list principals", adminOnly), nil, b.ListPrincipals),
		// A hold starts a plan: it waits behind releases and captures
		// (service.Endpoint.Bulk), which end or pay for plans.
		service.Op(service.Bulk(signed("hold", wire.BankHold, "hold money of", ownOrBroker)), func(r *wire.HoldRequest) string { return r.User }, b.Hold),
		service.Op(signed("release", wire.BankRelease, "release holds of", ownOrBroker), func(r *wire.ReleaseRequest) string { return r.User }, b.Release),
		service.Op(signed("extend", wire.BankExtend, "extend holds of", ownOrBroker), func(r *wire.ExtendRequest) string { return r.User }, b.Extend),
		service.Op(signed("transfer", wire.BankTransfer, "move money of", ownMoney), func(r *wire.TransferRequest) string { return r.From }, b.Transfer),
		service.Op(signed("capture", wire.BankCapture, "capture for host", ownHost), func(r *wire.CaptureBatch) string { return r.Host }, b.Capture),
		service.Op(read("holds", wire.BankOpenHolds, "list open holds", brokerOrAdmin), nil, b.OpenHolds),
		service.Op(read("holds_get", wire.BankHolds, "read holds", brokerOrAdmin), nil, b.Holds),
		service.Op(read("balance", wire.BankBalance, "read the balance of", balanceReaders), func(r *wire.BalanceRequest) string { return r.User }, b.Balance),
		service.Op(read("statement", wire.BankStatement, "read the statement of", accountReaders), statementAccount, b.Statement),
		service.Op(read("ledger", wire.BankLedger, "read the ledger", adminOnly), nil, func(ctx context.Context, _ *wire.LedgerRequest) (wire.LedgerReply, error) { return b.Ledger(ctx) }),
		service.Op(open("whois", wire.BankWhois), nil, func(ctx context.Context, r *wire.WhoisRequest) (wire.Principal, error) { return b.Whois(ctx, r.Key) }),
	}
}

// Serve answers the bank's subjects (Endpoints) on nc. The bank is its own
// registry of identities and keeps nonces in its store, so a replay is
// refused across restarts and by every replica. Requests are queued per
// signer and served in turn (service.Fair), so one principal's flood does
// not starve the others; every money-moving success writes its audit event
// in its own transaction, and a publisher sends them to the MRM_EVENTS
// stream (outbox.go). With Options.Signer every reply is signed by the
// bank's key, its principal record attached (see service.Options.Signer).
// Each revocation committed is announced on wire.RegistryRevoked before it
// is answered, and the notices of every replica are followed: a key one
// replica revoked is refused by the others at once. stop stops answering
// and publishing (what is left waits in the outbox).
func Serve(nc *nats.Conn, b *Bank) (stop func(), err error) {
	pub, err := newPublisher(nc, b)
	if err != nil {
		return nil, err
	}
	unfollow, err := service.FollowRevocations(nc, b.adminKey, b.heardRevoked, b.forgetAll)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.notify = func(n wire.RevokedNotice) {
		if service.PublishRevoked(nc, n) != nil {
			b.metrics.Error("bank", "revoked_notice") // the others' caches expire within their TTL
		}
	}
	b.mu.Unlock()
	svc, err := service.Serve(nc, "mrm-bank", service.Version, Endpoints(b), service.Options{
		Auth:        &service.Authorizer{Identities: b, Nonces: storeNonces{b}, Now: b.signingClock},
		Observe:     func(op, code string, took time.Duration) { b.metrics.Request("bank", op, code, took) },
		Description: "mrmarket's ledger",
		Fair:        &service.Fair{Unordered: true},
		Logger:      b.logger,
		Signer:      b.signer,
		Cert:        b.ownCert,
	})
	if err != nil {
		unfollow()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pub.run(ctx)
	}()
	return func() {
		_ = svc.Stop()
		unfollow()
		cancel()
		<-done
	}, nil
}

// heardRevoked takes a revocation notice, this replica's or another's: the
// key is revoked for good (its records opened under the anchor), or, in a
// bank without one, read again when next asked.
func (b *Bank) heardRevoked(n wire.RevokedNotice) {
	if b.adminKey == "" {
		b.forget(n.Key)
		return
	}
	b.remember(wire.Principal{Key: n.Key, Name: n.Name, Role: n.Role, Cert: n.Record}, true)
}

// forgetAll drops the cached keys: notices may have been missed.
func (b *Bank) forgetAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.principals)
}

// ownCert is the bank's own principal record, once registered (nil before:
// replies are signed but nobody trusts them yet). It is read through the
// principal cache, so a rotation or revocation is seen; while the store
// cannot be read the record last found is kept. Dropped then, every reply
// of a bank whose database was failing over — its "unavailable, retry"
// above all — went out without a record, and clients ignored it and waited
// out their whole attempt instead of asking again at once.
func (b *Bank) ownCert() *wire.Sealed {
	if b.signer == nil {
		return nil
	}
	key := b.signer.Public()
	if c, ok := b.cached(key); ok && c.revoked {
		b.ownLast.Store(nil)
		return nil
	} else if ok && c.p.Cert != nil {
		b.ownLast.Store(c.p.Cert)
		return c.p.Cert
	}
	if last := b.ownMiss.Load(); last != 0 && time.Since(time.Unix(0, last)) < time.Second {
		return b.ownLast.Load() // not found a moment ago: do not ask the store on every reply
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p, err := b.Whois(ctx, key)
	switch {
	case err == nil && p.Cert != nil:
		b.ownLast.Store(p.Cert)
		return p.Cert
	case err == nil || !IsUnavailable(err):
		b.ownLast.Store(nil) // not registered, revoked: an answer, not an outage
	}
	b.ownMiss.Store(time.Now().UnixNano())
	return b.ownLast.Load()
}
