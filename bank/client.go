package bank

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Client is the bank over NATS. Its methods set each request's version and
// sign mutating requests: with Signer when set (an agent, the broker), else
// with the credentials Keys holds for the principal the request acts as
// (admin for grants, the user for holds and transfers). The bank refuses
// unsigned mutating requests.
type Client struct {
	NC     *nats.Conn
	Signer *wire.Signer
	Keys   wire.Keyring
}

func (c Client) call(ctx context.Context, subject string, req, res any) error {
	return wire.CallAs(ctx, c.NC, nil, subject, req, res)
}

func (c Client) callAs(ctx context.Context, role, name, subject string, req, res any) error {
	s, err := wire.SignerFor(c.Signer, c.Keys, role, name)
	if err != nil {
		return err
	}
	return wire.CallAs(ctx, c.NC, s, subject, req, res)
}

// Grant mints money into a user's account (admin).
func (c Client) Grant(ctx context.Context, req *wire.GrantRequest) (rep wire.GrantReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, wire.RoleAdmin, "admin", wire.BankGrant, req, &rep)
}

// Hold moves a user's money into escrow (the user or the broker).
func (c Client) Hold(ctx context.Context, req *wire.HoldRequest) (rep wire.HoldReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, wire.RoleUser, req.User, wire.BankHold, req, &rep)
}

// Capture sends one tick's capture batch (the host's agent).
func (c Client) Capture(ctx context.Context, req *wire.CaptureBatch) (rep wire.CaptureReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, wire.RoleAgent, req.Host, wire.BankCapture, req, &rep)
}

// Release closes a hold and returns its remainder (its user or the broker).
func (c Client) Release(ctx context.Context, req *wire.ReleaseRequest) (rep wire.ReleaseReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, wire.RoleUser, req.User, wire.BankRelease, req, &rep)
}

// Extend adds money to an open hold (its user or the broker).
func (c Client) Extend(ctx context.Context, req *wire.ExtendRequest) (rep wire.HoldReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, wire.RoleUser, req.User, wire.BankExtend, req, &rep)
}

// Transfer moves money from one user to another (the payer).
func (c Client) Transfer(ctx context.Context, req *wire.TransferRequest) (rep wire.TransferReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, wire.RoleUser, req.From, wire.BankTransfer, req, &rep)
}

// SetIncome sets an income schedule (admin).
func (c Client) SetIncome(ctx context.Context, req *wire.IncomeSetRequest) (rep wire.IncomeSetReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, wire.RoleAdmin, "admin", wire.BankIncome, req, &rep)
}

// AddPrincipal registers an identity (admin).
func (c Client) AddPrincipal(ctx context.Context, req *wire.PrincipalRequest) (rep wire.Principal, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, wire.RoleAdmin, "admin", wire.BankPrincipal, req, &rep)
}

// Whois finds the principal of a public key.
func (c Client) Whois(ctx context.Context, key string) (rep wire.Principal, err error) {
	return rep, c.call(ctx, wire.BankWhois, &wire.WhoisRequest{Versioned: wire.Versioned{V: wire.Version}, Key: key}, &rep)
}

// Balance reports a user's account.
func (c Client) Balance(ctx context.Context, req *wire.BalanceRequest) (rep wire.BalanceReply, err error) {
	req.V = wire.Version
	return rep, c.call(ctx, wire.BankBalance, req, &rep)
}

// Statement lists an account's transfers.
func (c Client) Statement(ctx context.Context, req *wire.StatementRequest) (rep wire.StatementReply, err error) {
	req.V = wire.Version
	return rep, c.call(ctx, wire.BankStatement, req, &rep)
}

// Ledger returns the ledger and its invariant check.
func (c Client) Ledger(ctx context.Context) (rep wire.LedgerReply, err error) {
	return rep, c.call(ctx, wire.BankLedger, &wire.LedgerRequest{Versioned: wire.Versioned{V: wire.Version}}, &rep)
}
