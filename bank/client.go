package bank

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Client is the bank over NATS. Its methods set each request's version and
// sign mutating requests: with Signer when set (an agent, the broker), else
// with the credentials Keys holds for the principal the request acts as
// (admin for grants, the user for holds and transfers). The bank refuses
// unsigned mutating requests.
//
// With AdminKey set (the trust anchor), every answer is believed only when
// signed by a principal of role bank whose record the admin sealed
// (rpc.Trusted) — whois answers too, whose own record the caller
// checks as well (service.Certified), so not even a genuine but outdated
// record can be replayed by someone answering in the bank's place: an unsigned or forged reply, an error
// reply included, is ignored and the call fails as unavailable if no
// trusted one comes, so an agent keeps its bids and captures again next
// tick, and a CLI never prints a grant the bank did not make. OnRefused
// hears each reply ignored.
type Client struct {
	NC        *nats.Conn
	Signer    *signing.Signer
	Keys      signing.Keyring
	AdminKey  string
	OnRefused func(error)
	// Attempt, when set, bounds each try of a call (rpc.Retried): a try that
	// gets no answer in time — the bank it reached died holding it, or none
	// answered — is sent again (signed afresh) until ctx ends, and reaches
	// a live bank. Every bank request is idempotent by its id (whois is a
	// read), so a second try of one that did apply is the bank's replay.
	// Zero: one try, bounded by ctx. The daemons set it (DaemonAttempt),
	// for their whois lookups too, so one bank's death costs their
	// requests one Attempt, not their whole deadline.
	Attempt time.Duration
}

// DaemonAttempt is the daemons' Client.Attempt.
const DaemonAttempt = rpc.DaemonAttempt

var asAdmin = rpc.As{Role: wire.RoleAdmin, Name: "admin"}

// call is every method's one path: sign as who (the zero As: unsigned),
// send, decode — believing only the bank's signed answer when c knows the
// anchor — and send again while no answer comes, as c.Attempt says.
func call[Rep any](ctx context.Context, c Client, who rpc.As, subject string, req wire.Message) (Rep, error) {
	opts := []rpc.Option{rpc.SignedAs(who, c.Signer, c.Keys), rpc.Retried(c.Attempt, rpc.NoAnswer)}
	if c.AdminKey != "" {
		opts = append(opts, rpc.Trusted(signing.TrustRole(c.AdminKey, wire.RoleBank), c.OnRefused))
	}
	return rpc.Request[Rep](ctx, c.NC, subject, req, opts...)
}

// Grant mints money into a user's account (admin).
func (c Client) Grant(ctx context.Context, req *wire.GrantRequest) (wire.GrantReply, error) {
	return call[wire.GrantReply](ctx, c, asAdmin, wire.BankGrant, req)
}

// Hold moves a user's money into escrow (the user or the broker).
func (c Client) Hold(ctx context.Context, req *wire.HoldRequest) (wire.HoldReply, error) {
	return call[wire.HoldReply](ctx, c, rpc.As{Role: wire.RoleUser, Name: req.User}, wire.BankHold, req)
}

// Capture sends one tick's capture batch (the host's agent).
func (c Client) Capture(ctx context.Context, req *wire.CaptureBatch) (wire.CaptureReply, error) {
	return call[wire.CaptureReply](ctx, c, rpc.As{Role: wire.RoleAgent, Name: req.Host}, wire.BankCapture, req)
}

// Release closes a hold and returns its remainder (its user or the broker).
func (c Client) Release(ctx context.Context, req *wire.ReleaseRequest) (wire.ReleaseReply, error) {
	return call[wire.ReleaseReply](ctx, c, rpc.As{Role: wire.RoleUser, Name: req.User}, wire.BankRelease, req)
}

// Extend adds money to an open hold (its user or the broker).
func (c Client) Extend(ctx context.Context, req *wire.ExtendRequest) (wire.HoldReply, error) {
	return call[wire.HoldReply](ctx, c, rpc.As{Role: wire.RoleUser, Name: req.User}, wire.BankExtend, req)
}

// Transfer moves money from one user to another (the payer).
func (c Client) Transfer(ctx context.Context, req *wire.TransferRequest) (wire.TransferReply, error) {
	return call[wire.TransferReply](ctx, c, rpc.As{Role: wire.RoleUser, Name: req.From}, wire.BankTransfer, req)
}

// SetIncome sets an income schedule (admin).
func (c Client) SetIncome(ctx context.Context, req *wire.IncomeSetRequest) (wire.IncomeSetReply, error) {
	return call[wire.IncomeSetReply](ctx, c, asAdmin, wire.BankIncome, req)
}

// AddPrincipal registers an identity (admin).
func (c Client) AddPrincipal(ctx context.Context, req *wire.PrincipalRequest) (wire.Principal, error) {
	return call[wire.Principal](ctx, c, asAdmin, wire.BankPrincipal, req)
}

// RevokePrincipal revokes a key (admin).
func (c Client) RevokePrincipal(ctx context.Context, req *wire.RevokeRequest) (wire.RevokeReply, error) {
	return call[wire.RevokeReply](ctx, c, asAdmin, wire.BankRevoke, req)
}

// RotatePrincipal gives a principal a new key in place of its old one (admin).
func (c Client) RotatePrincipal(ctx context.Context, req *wire.RotateRequest) (wire.RotateReply, error) {
	return call[wire.RotateReply](ctx, c, asAdmin, wire.BankRotate, req)
}

// ListPrincipals lists the registry (admin).
func (c Client) ListPrincipals(ctx context.Context, req *wire.PrincipalsRequest) (wire.PrincipalsReply, error) {
	return call[wire.PrincipalsReply](ctx, c, asAdmin, wire.BankPrincipals, req)
}

// Whois finds the principal of a public key.
func (c Client) Whois(ctx context.Context, key string) (wire.Principal, error) {
	return call[wire.Principal](ctx, c, rpc.As{}, wire.BankWhois, &wire.WhoisRequest{Key: key})
}

// Balance reports a user's account (signed as the user, or by Signer: the
// broker, an admin).
func (c Client) Balance(ctx context.Context, req *wire.BalanceRequest) (wire.BalanceReply, error) {
	return call[wire.BalanceReply](ctx, c, rpc.As{Role: wire.RoleUser, Name: req.User}, wire.BankBalance, req)
}

// Statement lists an account's transfers: a user's signed as the user,
// another account's as admin (or by Signer: a host's agent for its
// provider account).
func (c Client) Statement(ctx context.Context, req *wire.StatementRequest) (wire.StatementReply, error) {
	who := asAdmin
	if req.User != "" {
		who = rpc.As{Role: wire.RoleUser, Name: req.User}
	}
	return call[wire.StatementReply](ctx, c, who, wire.BankStatement, req)
}

// Ledger returns the ledger and its invariant check (admin).
func (c Client) Ledger(ctx context.Context) (wire.LedgerReply, error) {
	return call[wire.LedgerReply](ctx, c, asAdmin, wire.BankLedger, &wire.LedgerRequest{})
}

// Holds reads holds by id (the broker, an admin).
func (c Client) Holds(ctx context.Context, req *wire.HoldsRequest) (wire.HoldsReply, error) {
	return call[wire.HoldsReply](ctx, c, asAdmin, wire.BankHolds, req)
}

// OpenHolds lists open holds (the broker, an admin).
func (c Client) OpenHolds(ctx context.Context, req *wire.OpenHoldsRequest) (wire.OpenHoldsReply, error) {
	return call[wire.OpenHoldsReply](ctx, c, asAdmin, wire.BankOpenHolds, req)
}
