package service

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Signed replies (rpc.Trusted is the requester's side). With
// Options.Signer set, Serve signs every reply, refusals included — but two
// refusals a flood is answered with, cheaply: busy, and a signature that
// does not verify (nobody signed that request to trust the answer): headers
// Mrm-Key and Mrm-Sig over the reply subject, the request's nonce ("" when
// unsigned) and the body, plus Mrm-Cert, the signer's principal record,
// when Options.Cert has one. A client that acts on an answer believes it
// only when it is signed by a principal of the role it expects.

// replyOpts are the respond options that sign body as the reply to r; none
// without a Signer.
func replyOpts(opts Options, r request, body []byte) []micro.RespondOpt {
	if opts.Signer == nil {
		return nil
	}
	var cert *wire.Sealed
	if opts.Cert != nil {
		cert = opts.Cert()
	}
	nonce := nats.Header(r.Headers()).Get(signing.HeaderNonce)
	h := opts.Signer.SignReply(r.Reply(), nonce, body, cert)
	return []micro.RespondOpt{micro.WithHeaders(micro.Headers(h))}
}
