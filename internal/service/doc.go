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
//  1. verify the signature, if any (a bad or stale one is refused);
//  2. decode strictly into the endpoint's wire request type (wire.Decode);
//  3. authorize (Authorizer.Authorize, reading the endpoint's roles);
//  4. run the handler, a panic becoming an internal error;
//  5. report the outcome to Options.Observe (the metrics), and reply with
//     the wire envelope (wire.EncodeReply) — refusals through micro's
//     Request.Error so micro counts them, with the same envelope as body.
//
// Replies are the bytes clients decoded before this package existed
// (wire.Call, wire.CallAs, bank.Client, broker.Client); micro only adds its
// error headers to refusals. With Options.Signer every reply, refusals
// included, is also signed (reply.go): headers Mrm-Key, Mrm-Sig and the
// signer's record Mrm-Cert, checked by wire.CallTrusted.
//
// # Authorization
//
// One function, Authorizer.Authorize, decides for every endpoint: an
// unsigned endpoint is open to any client of the NATS account; a signed one
// needs a signature (wire.ErrUnsigned), a known key (Identities, through a
// bounded WhoisCache when the component wants one), a role the endpoint
// allows (wire.ErrRole, "<name> (<role>) may not <what>") and a nonce not
// seen before (Nonces: the bank's durable store, or MemoryNonces). Without
// Identities every request passes, signed or not: what tests and the
// simulator rely on. Signatures are still verified when present. Over the
// network, Identities are wrapped by Certified: an answer counts only with
// the admin-sealed record of the asked key (wire.OpenPrincipal), so whoever
// answers whois in the bank's place makes nobody a principal.
//
// # Clocks
//
// The Authorizer's Now is the one clock of authentication: signature
// freshness, nonce expiry and whois-cache expiry all read it. It defaults to
// the wall clock, which is what components use: a signing time is a
// transport property, compared with the receiver's wall clock whatever
// virtual clock the market runs on (see wire.Signer). Tests inject their own.
package service
