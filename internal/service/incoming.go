package service

import (
	"context"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Incoming is the request a handler is serving, as it arrived: the
// endpoint serving it, its subject, body and reply subject, who signed it
// and the signed request itself (a mandate the handler may carry on, see
// wire.SignedRequest). Principal is the registered identity of the signer
// when the Authorizer resolved it.
type Incoming struct {
	Op        string // the endpoint's name
	Subject   string
	Body      []byte
	Reply     string
	Caller    wire.Caller
	Signed    wire.SignedRequest // zero for an unsigned request
	Principal wire.Principal     // zero when not resolved
}

type incomingKey struct{}

// withIncoming gives ctx the request being served.
func withIncoming(ctx context.Context, in *Incoming) context.Context {
	return context.WithValue(ctx, incomingKey{}, in)
}

// IncomingFrom returns the request a handler's ctx serves; ok is false
// outside service.Serve (a direct call, a test).
func IncomingFrom(ctx context.Context) (Incoming, bool) {
	in, ok := ctx.Value(incomingKey{}).(*Incoming)
	if !ok {
		return Incoming{}, false
	}
	return *in, true
}
