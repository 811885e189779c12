package broker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// whoisTTL is how long the broker trusts a cached identity, and whoisSize
// how many it remembers.
const (
	whoisTTL  = time.Minute
	whoisSize = 4096
)

// Endpoints is the broker's table, in the broker's queue group so replicas
// share the load. When the broker knows identities (Config.Identities):
// plans and jobs change only by requests signed by the user they act for
// (or an admin), and those that move money are audited; a user lists only
// its own plans and jobs (asking for nobody in particular lists its own, an
// admin's lists everyone's) and quotes only for itself; prices and
// predictions are market data, read by any registered principal. VMs carry
// their owners' money (each bid's plan, hold, budget and charge): a user
// lists its own and only aggregates of the others' (Broker.UserVMs), the
// admin and the brokers every VM, agents none (an agent knows its own
// host's). Reads are replayable (no nonce is stored). b may be nil to list
// the table.
func Endpoints(b *Broker) service.Table {
	q := wire.QueueBroker
	userOnly := []service.Allow{service.Role(wire.RoleAdmin), service.Own(wire.RoleUser)}
	anyone := []service.Allow{service.Role(wire.RoleAdmin), service.Role(wire.RoleUser), service.Role(wire.RoleBroker), service.Role(wire.RoleAgent)}
	signed := func(name, subject string) service.Endpoint {
		return service.Endpoint{Name: name, Subject: subject, Queue: q, Signed: true, Allow: userOnly, What: "spend for", Audit: true}
	}
	mine := func(name, subject, what string) service.Endpoint {
		return service.Endpoint{Name: name, Subject: subject, Queue: q, Signed: true, Allow: userOnly, What: what, Replayable: true}
	}
	market := func(name, subject string) service.Endpoint {
		return service.Endpoint{Name: name, Subject: subject, Queue: q, Signed: true, Allow: anyone, What: "read the market", Replayable: true}
	}
	vms := service.Endpoint{Name: "vms", Subject: wire.BrokerVMs, Queue: q, Signed: true, Replayable: true, What: "list the VMs of",
		Allow: []service.Allow{service.Role(wire.RoleAdmin), service.Own(wire.RoleUser), service.Role(wire.RoleBroker)}}
	// New plans wait behind every other request (service.Bulk): under a
	// flood of spends a cancel, plans or a read is answered first.
	progress := signed("progress", wire.BrokerProgress)
	progress.Audit = false // a job's progress moves no money
	// A stage start moves no money either: it only points the user's own
	// staged plans at a later stage, whose VMs they then fund from the
	// budget and at the pace the user signed (the hold and the mandate stay
	// as they were), and never back. What it changes shows in the plan
	// (its stage, in plans), not in the ledger.
	stage := signed("stage", wire.BrokerStage)
	stage.Audit, stage.What = false, "move the plans of"
	return service.Table{
		service.Op(service.Bulk(signed("spend", wire.BrokerSpend)), func(r *wire.SpendRequest) string { return r.User },
			func(ctx context.Context, r *wire.SpendRequest) (wire.SpendReply, error) {
				rep, err := b.Spend(ctx, r)
				if err == nil {
					rep.Plan = b.planWithFigures(ctx, rep.Plan)
				}
				return rep, err
			}),
		service.Op(signed("cancel", wire.BrokerCancel), func(r *wire.CancelRequest) string { return r.User }, withFigures(b, b.Cancel)),
		service.Op(signed("adjust", wire.BrokerAdjust), func(r *wire.AdjustRequest) string { return r.User }, withFigures(b, b.Adjust)),
		service.Op(mine("quote", wire.BrokerQuote, "quote for"), func(r *wire.QuoteRequest) string { return r.User }, b.Quote),
		service.Op(service.Bulk(signed("submit", wire.BrokerSubmit)), func(r *wire.SubmitRequest) string { return r.User },
			func(ctx context.Context, r *wire.SubmitRequest) (wire.SubmitReply, error) {
				rep, err := b.Submit(ctx, r)
				if err == nil {
					rep.Plan = b.planWithFigures(ctx, rep.Plan)
					rep.Job.Spent = rep.Plan.Spent
				}
				return rep, err
			}),
		service.Op(progress, func(r *wire.ProgressRequest) string { return r.User }, b.JobProgress),
		service.Op(stage, func(r *wire.StageRequest) string { return r.User }, b.StartStage),
		service.OpMine(mine("jobs", wire.BrokerJobs, "list the jobs of"), func(r *wire.JobsRequest) *string { return &r.User },
			func(ctx context.Context, r *wire.JobsRequest) (wire.JobsReply, error) {
				return b.jobsWithFigures(ctx, b.Jobs(r)), nil
			}),
		service.Op(market("predict", wire.BrokerPredict), nil, func(_ context.Context, r *wire.PredictRequest) (wire.PredictReply, error) { return b.Predict(r) }),
		service.OpMine(mine("plans", wire.BrokerPlans, "list the plans of"), func(r *wire.PlansRequest) *string { return &r.User },
			func(ctx context.Context, r *wire.PlansRequest) (wire.PlansReply, error) {
				rep := b.Plans(r)
				b.bankFigures(ctx, rep.Plans)
				return rep, nil
			}),
		service.Op(market("price", wire.BrokerPrice), nil, func(_ context.Context, r *wire.PriceRequest) (wire.PriceReply, error) { return b.Price(r) }),
		service.OpMine(vms, func(r *wire.VMsRequest) *string { return &r.Owner },
			func(ctx context.Context, r *wire.VMsRequest) (wire.VMsReply, error) {
				if user, ok := onlyOwn(ctx); ok {
					return b.UserVMs(user, r.Host), nil
				}
				return b.VMs(r), nil
			}),
	}
}

// onlyOwn names the principal a request came from when it may read only
// its own money on the market's VMs: everyone but the admin and the
// brokers. A broker without identities authenticates nobody, and answers
// every request in full, as it admits every request (the simulator, tests).
func onlyOwn(ctx context.Context) (string, bool) {
	in, ok := service.IncomingFrom(ctx)
	if role := in.Principal.Role; !ok || role == "" || role == wire.RoleAdmin || role == wire.RoleBroker {
		return "", false
	}
	return in.Principal.Name, true
}

// Serve feeds b with every host's state (the live subject, after catching
// up from the MRM_HOSTS bucket when it exists), each checked as states.go
// says, follows the bank's revocation notices (retire.go) and answers the
// broker's subjects (Endpoints). stop unsubscribes and stops answering.
func Serve(nc *nats.Conn, b *Broker) (stop func(), err error) {
	intake := newStateIntake(b)
	unsubscribe, err := intake.subscribe(nc)
	if err != nil {
		return nil, err
	}
	if err := catchUp(nc, intake); err != nil {
		unsubscribe()
		return nil, err
	}
	audit, err := service.NewJetStreamAudit(nc)
	if err != nil {
		unsubscribe()
		return nil, err
	}
	audit.OnError = func(error) { b.cfg.Metrics.Error("broker", "audit") }
	audit.Logger = b.cfg.Logger
	auth := service.Remote(b.identities(), b.cfg.SigningClock, whoisTTL, whoisSize)
	if auth.Nonces, err = b.nonces(nc); err != nil {
		unsubscribe()
		return nil, err
	}
	unfollow, err := b.followRevocations(nc, auth, intake)
	if err != nil {
		unsubscribe()
		return nil, err
	}
	cert := service.OwnRecord(b.identities(), b.cfg.AdminKey, b.cfg.Signer, wire.RoleBroker, "")
	if cert != nil {
		_ = cert() // now, while nothing is busy: replies carry it from the first
	}
	svc, err := service.Serve(nc, "mrm-broker", service.Version, Endpoints(b), service.Options{
		Auth:        auth,
		Observe:     func(op, code string, took time.Duration) { b.cfg.Metrics.Request("broker", op, code, took) },
		Description: "mrmarket's broker: prices, spend plans, deadlines",
		Metadata:    map[string]string{"replica": b.cfg.Replica},
		Fair:        &service.Fair{Unordered: true},
		Logger:      b.cfg.Logger,
		LogAttrs:    []any{"replica", b.cfg.Replica},
		Audit:       audit,
		Signer:      b.cfg.Signer,
		Cert:        cert,
	})
	if err != nil {
		unfollow()
		unsubscribe()
		return nil, err
	}
	return func() {
		unfollow()
		unsubscribe()
		_ = svc.Stop()
	}, nil
}

// catchUp reads the last state of every host from the MRM_HOSTS bucket,
// checked like live ones (but of any age: a host may be silent). No
// JetStream or no bucket yet is not an error: states will come live.
func catchUp(nc *nats.Conn, intake *stateIntake) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	kv, err := js.KeyValue(ctx, wire.BucketHosts)
	if err != nil {
		return nil
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		_ = intake.take(ctx, e.Value(), false) // refused states are counted
	}
	return nil
}

// Client is the broker over NATS. Its methods set each request's version
// and sign every request with Signer, or else with the credentials Keys
// holds for the request's user; requests that act for no user (prices, VMs,
// predictions, everyone's plans and jobs) are signed as Reader. With
// AdminKey (the trust anchor) set, an answer is believed only when signed by
// a broker principal whose record the admin sealed (rpc.Trusted): a
// forged reply — "spent", or an error — is ignored. OnRefused hears each
// reply ignored.
type Client struct {
	NC        *nats.Conn
	Signer    *signing.Signer
	Keys      signing.Keyring
	AdminKey  string
	OnRefused func(error)
	// Reader signs the reads that act for no user; zero is the admin.
	Reader rpc.As
}

// reader is who signs c's reads that act for no user.
func (c Client) reader() rpc.As {
	if c.Reader == (rpc.As{}) {
		return rpc.As{Role: wire.RoleAdmin, Name: wire.RoleAdmin}
	}
	return c.Reader
}

// mine is who signs a read of user's own (plans, jobs): the user, or the
// reader for nobody in particular.
func (c Client) mine(user string) rpc.As {
	if user == "" {
		return c.reader()
	}
	return asUser(user)
}

// asUser signs a request as user; no user sends it unsigned.
func asUser(user string) rpc.As {
	if user == "" {
		return rpc.As{}
	}
	return rpc.As{Role: wire.RoleUser, Name: user}
}

// call is every method's one path: sign as who (the zero As: unsigned),
// send, decode.
func call[Rep any](ctx context.Context, c Client, who rpc.As, subject string, req wire.Message) (Rep, error) {
	opts := []rpc.Option{rpc.SignedAs(who, c.Signer, c.Keys)}
	if c.AdminKey != "" {
		opts = append(opts, rpc.Trusted(signing.TrustRole(c.AdminKey, wire.RoleBroker), c.OnRefused))
	}
	return rpc.Request[Rep](ctx, c.NC, subject, req, opts...)
}

// Spend starts a plan.
func (c Client) Spend(ctx context.Context, req *wire.SpendRequest) (wire.SpendReply, error) {
	return call[wire.SpendReply](ctx, c, asUser(req.User), wire.BrokerSpend, req)
}

// Cancel ends a plan now.
func (c Client) Cancel(ctx context.Context, req *wire.CancelRequest) (wire.Plan, error) {
	return call[wire.Plan](ctx, c, asUser(req.User), wire.BrokerCancel, req)
}

// Adjust gives a running plan more or less budget.
func (c Client) Adjust(ctx context.Context, req *wire.AdjustRequest) (wire.Plan, error) {
	return call[wire.Plan](ctx, c, asUser(req.User), wire.BrokerAdjust, req)
}

// Predict asks a what-if question of a host's price history.
func (c Client) Predict(ctx context.Context, req *wire.PredictRequest) (wire.PredictReply, error) {
	return call[wire.PredictReply](ctx, c, c.reader(), wire.BrokerPredict, req)
}

// Plans lists plans.
func (c Client) Plans(ctx context.Context, req *wire.PlansRequest) (wire.PlansReply, error) {
	return call[wire.PlansReply](ctx, c, c.mine(req.User), wire.BrokerPlans, req)
}

// Price reports host prices.
func (c Client) Price(ctx context.Context, req *wire.PriceRequest) (wire.PriceReply, error) {
	return call[wire.PriceReply](ctx, c, c.reader(), wire.BrokerPrice, req)
}

// VMs lists VMs: every VM to the admin; to a user (a Reader of role
// user) its own, and of the others only aggregates per host.
func (c Client) VMs(ctx context.Context, req *wire.VMsRequest) (wire.VMsReply, error) {
	return call[wire.VMsReply](ctx, c, c.reader(), wire.BrokerVMs, req)
}

// Quote asks for a job's price-deadline curve.
func (c Client) Quote(ctx context.Context, req *wire.QuoteRequest) (wire.QuoteReply, error) {
	return call[wire.QuoteReply](ctx, c, asUser(req.User), wire.BrokerQuote, req)
}

// Submit admits a job with a deadline.
func (c Client) Submit(ctx context.Context, req *wire.SubmitRequest) (wire.SubmitReply, error) {
	return call[wire.SubmitReply](ctx, c, asUser(req.User), wire.BrokerSubmit, req)
}

// Progress reports a job's progress.
func (c Client) Progress(ctx context.Context, req *wire.ProgressRequest) (wire.Job, error) {
	return call[wire.Job](ctx, c, asUser(req.User), wire.BrokerProgress, req)
}

// StageStarted tells the broker that a stage of the user's workflow
// started: the user's running stage-priority plans with that workflow and
// stage move to it (Broker.StartStage). The reply names the plans that
// moved; none is no error.
func (c Client) StageStarted(ctx context.Context, req *wire.StageRequest) (wire.StageReply, error) {
	return call[wire.StageReply](ctx, c, asUser(req.User), wire.BrokerStage, req)
}

// Jobs lists admitted jobs.
func (c Client) Jobs(ctx context.Context, req *wire.JobsRequest) (wire.JobsReply, error) {
	return call[wire.JobsReply](ctx, c, c.mine(req.User), wire.BrokerJobs, req)
}

// withFigures answers op's plan with the bank's figures.
func withFigures[Req any](b *Broker, op func(context.Context, Req) (wire.Plan, error)) func(context.Context, Req) (wire.Plan, error) {
	return func(ctx context.Context, r Req) (wire.Plan, error) {
		p, err := op(ctx, r)
		if err == nil {
			p = b.planWithFigures(ctx, p)
		}
		return p, err
	}
}
