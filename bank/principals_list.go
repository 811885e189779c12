package bank

import (
	"context"
	"database/sql"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Principals lists every live principal (its key not revoked): the
// input of the NATS server's users (package natsauth), so a revoked key
// has none.
func (b *Bank) Principals(ctx context.Context) ([]wire.Principal, error) {
	rep, err := b.ListPrincipals(ctx, &wire.PrincipalsRequest{Live: true})
	if err != nil {
		return nil, err
	}
	out := make([]wire.Principal, len(rep.Principals))
	for i, p := range rep.Principals {
		out[i] = wire.Principal{Key: p.Key, Name: p.Name, Role: p.Role}
	}
	return out, nil
}

// ListPrincipals lists the registry: every key ever registered (of
// req.Role, named req.Name, only the live ones with req.Live), with when it
// was registered and, once revoked, when and by which key a rotation
// replaced it; by role, name and registration. (The admin's `bank
// principal list`.)
func (b *Bank) ListPrincipals(ctx context.Context, req *wire.PrincipalsRequest) (wire.PrincipalsReply, error) {
	if err := req.Validate(); err != nil {
		return wire.PrincipalsReply{}, err
	}
	q := `SELECT ` + principalColumns + ` FROM principals WHERE (? = '' OR role = ?) AND (? = '' OR name = ?) AND (? = 0 OR revoked = 0) ORDER BY role, name, created, key`
	live := 0
	if req.Live {
		live = 1
	}
	rep := wire.PrincipalsReply{Principals: []wire.PrincipalInfo{}}
	err := b.st.run(ctx, func(t tx) error {
		rep.Principals = rep.Principals[:0]
		return eachRow(ctx, t, func(rows *sql.Rows) error {
			r, err := scanPrincipal(rows)
			if err == nil {
				rep.Principals = append(rep.Principals, r.info())
			}
			return err
		}, q, req.Role, req.Role, req.Name, req.Name, live)
	})
	return rep, err
}
