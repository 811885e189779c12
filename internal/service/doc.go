// Package service serves a component's NATS request/reply subjects from one
// declaration. It is plumbing only: what a request does is the component's;
// how it travels, who may send it and what comes back is here, once.
//
// # Shape
//
// A component (bank, broker, agent) declares its subjects once, as a Table:
// one Endpoint per subject, with its queue group, whether it must be signed,
// the roles allowed (Allow: a role, optionally only for the principal the
// request acts for — a user holds only its own money, an agent captures only
// for its own host) and a typed handler (Op). The table serves (Serve), lists
// itself (Table.List: what NATS subject permissions are made from) and
// documents itself (WriteMarkdown: docs/SUBJECTS.md, checked by a test).
//
// Serve registers the table as a nats.go/micro service, so every endpoint has
// request and error counts and the service answers $SRV.PING, $SRV.INFO and
// $SRV.STATS discovery. One handler wraps every endpoint, in this order:
//
//  1. bound the headers a principal controls (an order key of at most 200
//     bytes, all headers at most 4 KiB): past them, refused at once;
//  2. verify the signature, if any (a bad or stale one is refused) — when
//     the service queues fairly (Options.Fair, see "Fair queuing"), in a
//     queue of the request's connection, and then queue the request by its
//     verified signer;
//  4. decode strictly into the endpoint's wire request type (wire.Decode);
//  5. authorize (Authorizer.Authorize, reading the endpoint's roles);
//  6. run the handler, a panic becoming an internal error;
//  7. report the outcome and how long it took to Options.Observe (the
//     metrics: counts and latency histograms), and reply with
//     the wire envelope (wire.EncodeReply) — refusals with micro's error
//     headers and the same envelope as body;
//  8. audit a success of an Audit endpoint (Options.Audit, see "Audit").
//
// Replies are the bytes clients decoded before this package existed
// (rpc.Request, bank.Client, broker.Client); micro only adds its
// error headers to refusals. Served in micro's goroutine (no Fair), micro
// counts refusals; a queued request is answered by a worker after micro's
// handler returned, so its refusals are counted in the endpoint's
// $SRV.STATS data instead ({"errors": n, "busy": n}).
// With Options.Signer every reply, refusals included (but "busy" and "bad
// signature", see Fair queuing), is also signed (reply.go): headers Mrm-Key, Mrm-Sig and the signer's record Mrm-Cert,
// checked by rpc.Request's Trusted option.
//
// # Authorization
//
// One function, Authorizer.Authorize, decides for every endpoint: an
// unsigned endpoint is open to any client of the NATS account; a signed one
// needs a signature (signing.ErrUnsigned), a known key (Identities, through a
// bounded WhoisCache when the component wants one), a role the endpoint
// allows (signing.ErrRole, "<name> (<role>) may not <what>") and a nonce not
// seen before (Nonces: the bank's durable store, or MemoryNonces). Without
// Identities every request passes, signed or not: what tests and the
// simulator rely on. Signatures are still verified when present. Over the
// network, Identities are wrapped by Certified: an answer counts only with
// the admin-sealed record of the asked key (signing.OpenPrincipal), so whoever
// answers whois in the bank's place makes nobody a principal.
//
// Roles: Role admits every principal of a role; Own only for requests
// acting for itself (a user's own money); OwnAs for requests acting for a
// value its name maps to (an agent for ProviderAccount(its host)), so that
// acts-for values of different roles never collide.
//
// # Reads
//
// Reads are signed too: who may read what is the table's, like who may
// write. A Replayable endpoint is a signed read whose nonce is not
// recorded: a replay, within the signature's freshness window, learns only
// what the signer could read anyway and changes nothing, and a read costs
// no write to the nonce store. Table.Check refuses a replayable endpoint
// that is not signed. OpMine declares a read whose request may leave who it
// acts for empty ("my plans"): a principal admitted only for its own gets
// its own (the field is filled with its name before authorization), an
// admin everyone's.
//
// # Audit
//
// An Audit endpoint moves money. Each of its successes, after the reply, is
// handed to Options.Audit as a wire.Event: component ("bank" for the
// service "mrm-bank"), operation, time, principal, the signed request
// exactly as received (wire.SignedRequest: anyone can verify it later) and
// the reply's result (EventOf). JetStreamAudit publishes them to the
// MRM_EVENTS stream on wire.EventSubject(component, op), with Nats-Msg-Id
// set to the event id (signer key and nonce) so that a retried publish is
// stored once; it publishes in the background and counts, reports and logs
// a failure, which never fails the request. That is after the fact: an
// event JetStream does not take is lost. The bank, whose requests move
// money, passes no Auditor: its handlers write EventOf's event in the
// transaction that moves the money and publish it from that outbox
// (bank/outbox.go). Refusals are not audited (they moved nothing; the
// metrics count them).
//
// # Fair queuing
//
// With Options.Fair, micro's handler only bounds a request's headers and
// queues it by its connection (its reply inbox); a pool of workers
// (started on demand) checks the signatures, the connections in turn, and
// queues each request by the key that signed it (an unsigned one by its
// connection); a second pool serves the principals in turn: one request of
// each principal with work, round-robin. The signature is verified (the
// ed25519 check alone, not the whois) before the request takes a place in
// its signer's queue: a request claiming another principal's key with a
// bad signature is refused, costing its sender a refusal (unsigned, as a
// busy one) and the service one check, and never takes that principal's
// slots — when the two shared a queue keyed by the claimed key, a flood of
// forgeries had alice's own requests refused busy. A forger's flood from
// its own connection waits in its own queue; one that names alice's inbox
// as its reply subject (NATS does not check it) shares her queue for the
// checks — see fairKey. A
// principal's requests to one endpoint that name the same order key
// (wire.HeaderOrder, none by default) run one at a time in the order sent
// (the order the single goroutine per endpoint used to give each sender);
// different principals', endpoints' and order keys' run concurrently,
// which the handlers allow (the bank is transactional, the agent locks its
// book, the broker its plans). The broker orders its bids to an agent by
// plan, so a cancel does not wait behind other plans' bids. Fair.Unordered
// drops the order altogether: the bank and the broker are queue groups of
// replicas, where a principal's requests were never in order, and their
// requests are idempotent by id — there a retry must not wait behind the
// attempt it retries, stuck on a dead NATS server until its handler's 5 s
// run out (the fault test saw one client's whole deadline lost so; see
// docs/HA.md). Slow
// requests (Options.Slow, SlowRequest) are logged with the time they
// waited in the queues and the time they ran. A connection or a principal with Fair.PerPrincipal requests
// waiting is answered "unavailable: busy, retry" at once. So a flood delays
// another principal by about one of the flooder's requests per turn, plus
// the time the subscription takes to queue (or refuse) what arrived before
// — measured in bank's TestFloodDoesNotStarveOthers. Requests that start
// new work (Endpoint.Bulk: a spend, a submit, a hold) wait in a lane of
// their own, served only when no other request waits: a flood of spends
// leaves a cancel, a plans or a capture the next free worker. And a
// request whose sender said how long it waits (wire.HeaderPatience) and
// has waited longer is dropped unserved: under overload the queues hold
// what is still awaited, not the tries already retried. Without Fair each
// endpoint's requests are served in arrival order by micro's goroutine,
// whoever sent them.
//
// # Clocks
//
// The Authorizer's Now is the one clock of authentication: signature
// freshness, nonce expiry and whois-cache expiry all read it. It defaults to
// the wall clock, which is what components use: a signing time is a
// transport property, compared with the receiver's wall clock whatever
// virtual clock the market runs on (see signing.Signer). Tests inject their own.
package service
