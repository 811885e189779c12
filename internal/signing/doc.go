// Package signing is who said what on mrmarket's wire: principals' NKeys
// and where their credentials live, signed requests, sealed records,
// principal records under the admin's key, sealed host states and signed
// replies. It makes and checks the signatures over the data shapes the
// contract carries (wire.SignedRequest, wire.Sealed, wire.Principal) and
// never rewrites them: what was signed is what travels, so an old and a
// new build verify each other.
//
// Every signature is ed25519 (an NKey) over a payload that starts with a
// tag of its kind, so none can be taken for another:
//
//   - a request (request.go): "mrm-sig-v1", subject, time, nonce, body, in
//     the headers Mrm-Key, Mrm-Time, Mrm-Nonce and Mrm-Sig; the body is
//     untouched, so strict decoding is the same signed or not. A receiver
//     refuses a bad signature, a time further than MaxSkew from its clock
//     and a nonce it has seen (NonceCache, or a store the replicas share);
//   - a sealed record (seal.go): "mrm-seal-v1", purpose, time, body, a
//     record one principal writes and others act on later, bound by its
//     purpose ("principal/<key>", "host-state/<host>", "plan/<id>") to the
//     one place it may be used;
//   - a reply (reply.go): "mrm-reply-v1", reply subject, the request's
//     nonce, body, so an answer cannot be moved to another request; a
//     ReplyTrust says whose answers a requester believes (rpc.Trusted);
//   - a NATS connection's nonce (SignNonce): the connection proves it holds
//     the principal's key, as every request it signs does.
//
// The trust anchor is the admin's public key: a principal is believed only
// through its record sealed by that key (principal.go), so a forged whois
// answer makes nobody a principal. What a principal may do is not decided
// here: package service authorizes requests by role, and package mandate
// reads what a user's own signed request allows.
package signing
