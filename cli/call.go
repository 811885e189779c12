package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// A command's round trip to the market is one path, call: check the
// request (bad input never waits on the network), connect as the command's
// principal, ask (an op), print the reply (show), close. A command only
// builds its request from its flags and names its op and its printer:
//
//	return call(c, onBank(bank.Client.Balance), req, printBalance)
//	return call(c, onBroker(broker.Client.Spend), req, printSpend)

// clients are the market's services as one command reaches them: over one
// connection, signing with the credentials of --creds.
type clients struct {
	bank   bank.Client
	broker broker.Client
	warn   io.Writer // where a retry says so
}

// op is one request to the market and its reply.
type op[Req, Rep any] func(ctx context.Context, cl clients, req Req) (Rep, error)

// onBank is the op of a bank client method (bank.Client.Grant…).
func onBank[Req, Rep any](m func(bank.Client, context.Context, Req) (Rep, error)) op[Req, Rep] {
	return func(ctx context.Context, cl clients, req Req) (Rep, error) { return m(cl.bank, ctx, req) }
}

// onBroker is the op of a broker client method (broker.Client.Spend…).
func onBroker[Req, Rep any](m func(broker.Client, context.Context, Req) (Rep, error)) op[Req, Rep] {
	return func(ctx context.Context, cl clients, req Req) (Rep, error) { return m(cl.broker, ctx, req) }
}

// call is every command's round trip (see above), asked as the policy
// says (asking, below). A request with a Validate method is checked first:
// what it refuses is bad input (exit 2) and nothing is sent.
func call[Req, Rep any](c *ucli.Context, do op[Req, Rep], req Req, human func(o *out, rep Rep) error) error {
	if v, ok := any(req).(wire.Validator); ok {
		if err := v.Validate(); err != nil {
			return usageError{err}
		}
	}
	return withClients(c, func(cl clients) error {
		rep, err := retried(do)(c.Context, cl, req)
		if err != nil {
			return err
		}
		return show(c, rep, human)
	})
}

// withClients runs use on a connection to the market named by --nats, which
// it closes afterwards: call's connection, and that of the commands that
// talk more than once (jobs watch). A request the NATS server refuses to
// this principal (a permission violation, reported asynchronously) ends the
// command at once as forbidden rather than as a time-out.
func withClients(c *ucli.Context, use func(cl clients) error) error {
	nc, err := connect(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithCancelCause(c.Context)
	defer cancel(nil)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			cancel(err)
		}
	})
	outer := c.Context
	c.Context = ctx
	defer func() { c.Context = outer }()
	keys := localKeys{credsDir(c)}
	anchor := clientAdminKey(c) // answers count only signed by the bank or the broker
	err = use(clients{bank: bank.Client{NC: nc, Keys: keys, AdminKey: anchor},
		broker: broker.Client{NC: nc, Keys: keys, AdminKey: anchor, Reader: reader(c)}, warn: c.App.ErrWriter})
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, nats.ErrPermissionViolation) {
		return wire.Errorf(wire.ErrForbidden, "the NATS server refused it to this principal (%s): %v", nc.Opts.Nkey, cause)
	}
	return err
}

// Asking. The CLI asks the market as the daemons ask each other (rpc's
// Retried, DaemonAttempt): every try is bounded by a short attempt, so a
// request lost with a dead or frozen replica — or with the NATS node it
// went through — costs one attempt, not the whole of a request's time; and
// an answer "unavailable" (a time-out, or a service that could not reach
// its store: the request may or may not have been applied) is asked again
// after a short backoff. Every request is safe to ask again: those that
// move money carry an id (spend, spend --more/--less, cancel, submit,
// transfer, grant; the CLI makes one when --id is not given, and shows
// it), each try a new signature and nonce of the same request, so it is
// applied once and its outcome is known; the others are reads, or set what
// they name (income, principals, a stage start: a plan moves forward only,
// so asked again it moves nothing more).

// asking is the CLI's policy, as data: the bound of each try, the pause
// before the next, and how long a command goes on asking before it gives
// up as unavailable (exit 4). The first attempt is the fault test's
// client's (docs/HA.md): the other replica answers a retry at once. After
// each try that got no answer in time, the next attempt is longer, up to
// rpc.DefaultTimeout, the time a service gives its handler, so a live but
// slow answer (a large statement or ledger) still comes; a try answered
// "unavailable" does not lengthen it (the service answers, fast), so the
// command waits at most one short attempt once the service is back. The pauses stay short, as the daemons' (a fixed 20 ms): an answer
// "unavailable" that comes at once (a plan still starting on the replica
// that took the first try) is asked again within a quarter of a second,
// not after a pause grown to a second.
var asking = struct {
	attempts retry.Options // attempts.Backoff(n) bounds try n
	pauses   retry.Options // the pause after each unavailable try
	patience time.Duration // the whole command's asking
}{
	attempts: rpc.Tries,
	pauses:   retry.Options{InitialBackoff: 50 * time.Millisecond, Multiplier: 2, MaxBackoff: 250 * time.Millisecond, Jitter: 0.5},
	patience: 30 * time.Second,
}

// retried is do asked as the policy says: each try bounded by its
// attempt, asked again with the same request while the answer is
// unavailable and patience lasts. It says so on the warning writer with
// the first unavailable answer, and with each that shows the request's
// work further on (wire.Progress: a spend placing bids on thousands of
// hosts), which also gives it its patience anew: work that advances is
// waited for.
func retried[Req, Rep any](do op[Req, Rep]) op[Req, Rep] {
	return func(ctx context.Context, cl clients, req Req) (rep Rep, err error) {
		tries, shown := 0, -1 // shown: the work done the last progress shown said
		late := 0             // tries that got no answer in time
		for advanced := true; advanced; {
			advanced = false
			patient, cancel := context.WithTimeout(ctx, asking.patience)
			for r := retry.Start(patient, asking.pauses); !advanced && r.Next(); {
				tries++
				actx, cancelTry := context.WithTimeout(patient, asking.attempts.Backoff(late+1))
				rep, err = do(actx, cl, req)
				if actx.Err() != nil && patient.Err() == nil {
					late++
				}
				cancelTry()
				if err == nil || !errors.Is(err, wire.ErrUnavailable) {
					cancel()
					return rep, err
				}
				if tries == 1 && cl.warn != nil {
					fmt.Fprintf(cl.warn, "mrmarket: %v; asking again with the same request for up to %s\n", err, span(asking.patience))
				}
				var we *wire.Error
				if errors.As(err, &we) && we.Progress != nil && we.Progress.Done > shown {
					if tries > 1 && cl.warn != nil {
						fmt.Fprintf(cl.warn, "mrmarket: %d of %d %s\n", we.Progress.Done, we.Progress.Of, we.Progress.What)
					}
					shown, advanced = we.Progress.Done, true
				}
			}
			cancel()
		}
		return rep, err
	}
}

// reader is who signs a command's reads that act for no user (prices, VMs,
// everyone's plans): the principal the command connects as (connPrincipal)
// — --user when it is set, else the admin (the zero As), else the one user
// whose credentials are there.
func reader(c *ucli.Context) rpc.As {
	if _, as, err := connPrincipal(c, credsDir(c)); err == nil && as.Role == wire.RoleUser {
		return as
	}
	return rpc.As{}
}

// requireUser returns --user (or MRM_USER, or the config file's user) or a
// usage error.
func requireUser(c *ucli.Context) (string, error) {
	u := setting(c, "user")
	if u == "" {
		return "", badInput("--user (or MRM_USER, or user in the config file) is required")
	}
	if err := wire.CheckName("user", u); err != nil {
		return "", usageError{err}
	}
	return u, nil
}
