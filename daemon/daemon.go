// Package daemon builds mrmarket's three daemons, the bank, the broker and
// a host's agent, for everyone who runs them: the standalone commands
// (mrmarket bank serve, mrmarket broker, mrmarket agent with or without
// --sim) and the whole market in one process (package market: up, demo and
// the end-to-end tests). What makes a daemon of a component is written
// here once: its own NATS connection, the JetStream assets it opens, the
// bank clients it captures through and resolves identities with, serving
// its subjects, and its tick loop.
//
// Decisions:
//   - The package stands above agent, bank and broker and below cli and
//     market, so the packages under internal/ stay plumbing and import none
//     of the three.
//   - A daemon's lifetime is its Env's stop.Stopper, which the caller owns
//     and stops once: each constructor registers what it opened as closers,
//     in the order that closes them right (a service stops before its
//     connection closes, a store closes after everything that wrote to
//     it), and Run starts the tick loop as a task of the stopper. Nothing
//     here returns a stop function.
//   - Starting and ticking are apart: a constructor serves, Run ticks. The
//     standalone commands call both; the market starts everything, runs a
//     first round by hand, and ticks on the wall clock only in up (demo
//     and the tests drive virtual time with Market.Tick).
//   - The caller decides how to connect (Env.Connect): the commands from
//     their flags, failing fast; the market retrying while an external
//     NATS learns the principals it just registered. Which key the bank
//     connects with, and which principals are registered first, are the
//     caller's too: the commands and the market bootstrap differently.
//   - One logger per process, handed down (Env.Logger); nil discards, so
//     tests and the demo stay quiet and nothing logs behind the caller's
//     back.
//   - No daemon creates a JetStream asset: the admin does (market: at start,
//     with the admin's key; a standalone deployment: mrmarket nats
//     assets), and each daemon opens the ones it uses, waiting up to
//     Env.AssetsWait for them (natsutil's assets.go). One it cannot open
//     makes the daemon unavailable (wire.ErrUnavailable): NATS is not
//     there as it must be.
package daemon

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/stop"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Connect opens a daemon's own NATS connection, named name, authenticated
// as signer. The daemon closes it when its stopper stops.
type Connect func(name string, signer *signing.Signer) (*nats.Conn, error)

// Env is what every daemon takes from the process that runs it.
type Env struct {
	// Stopper owns everything the daemon starts. Required.
	Stopper *stop.Stopper
	// Connect opens the daemon's connection. Required.
	Connect Connect
	// AdminKey is the trust anchor: a principal counts only with the
	// admin's record of it, an answer only signed by the expected role.
	AdminKey string
	// Metrics and Logger are the process's; nil counts or logs nothing.
	Metrics *obs.Metrics
	Logger  *slog.Logger
	// Now is the daemons' clock; nil is the wall clock.
	Now func() time.Time
	// AssetsWait is how long a daemon waits for the JetStream assets it
	// uses to exist; 0: natsutil.DefaultAssetsWait.
	AssetsWait time.Duration
}

// connect opens the daemon's connection, closed when the stopper stops.
func (e Env) connect(name string, signer *signing.Signer) (*nats.Conn, error) {
	nc, err := e.Connect(name, signer)
	if err != nil {
		return nil, err
	}
	e.Stopper.AddCloser(nc.Close)
	return nc, nil
}

// bankClients are a daemon's two bank clients over nc: one that signs as
// signer (captures, holds) and believes only the bank's signed answers,
// counting each one it ignores as component's untrusted reply; and one
// that resolves identities.
func (e Env) bankClients(nc *nats.Conn, signer *signing.Signer, component string) (signed, identities bank.Client) {
	m := e.Metrics
	signed = bank.Client{NC: nc, Signer: signer, AdminKey: e.AdminKey, Attempt: bank.DaemonAttempt,
		OnRefused: func(error) { m.Error(component, "untrusted_reply") }}
	identities = bank.Client{NC: nc, AdminKey: e.AdminKey, Attempt: bank.DaemonAttempt}
	return signed, identities
}

// unavailable is a JetStream asset's failure: NATS is not as it must be.
func unavailable(err error) error {
	return wire.Errorf(wire.ErrUnavailable, "%v", err)
}
