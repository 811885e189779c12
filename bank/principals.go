package bank

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// AddPrincipal registers (or changes) an identity.
func (b *Bank) AddPrincipal(ctx context.Context, req *wire.PrincipalRequest) (wire.Principal, error) {
	if err := req.Validate(); err != nil {
		return wire.Principal{}, err
	}
	err := b.st.run(ctx, func(t tx) error {
		_, err := t.exec(ctx, `INSERT INTO principals (key, name, role, created) VALUES (?, ?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET name = excluded.name, role = excluded.role`, req.Key, req.Name, req.Role, b.now().UnixNano())
		return err
	})
	if err != nil {
		return wire.Principal{}, err
	}
	p := wire.Principal{Key: req.Key, Name: req.Name, Role: req.Role}
	b.mu.Lock()
	b.principals[p.Key] = p
	b.mu.Unlock()
	if b.onPrincipal != nil {
		b.onPrincipal(p)
	}
	return p, nil
}

// Whois finds the principal of a public key.
func (b *Bank) Whois(ctx context.Context, key string) (wire.Principal, error) {
	b.mu.Lock()
	p, ok := b.principals[key]
	b.mu.Unlock()
	if ok {
		return p, nil
	}
	err := b.st.run(ctx, func(t tx) error {
		err := t.queryRow(ctx, `SELECT key, name, role FROM principals WHERE key = ?`, key).Scan(&p.Key, &p.Name, &p.Role)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w %s", wire.ErrUnknownKey, key)
		}
		return err
	})
	if err != nil {
		return wire.Principal{}, err
	}
	b.mu.Lock()
	b.principals[key] = p
	b.mu.Unlock()
	return p, nil
}

// storeNonces is the bank's nonce store for its Authorizer: a signed
// request's nonce is recorded in the store, and a second use is a replay.
// Nonces live in the store so a replay is refused across restarts and by
// every bank replica; Tick forgets those older than the signature window.
type storeNonces struct{ b *Bank }

// Use records c's nonce; wire.ErrReplay if it was recorded before.
func (n storeNonces) Use(ctx context.Context, c wire.Caller, _ time.Time) error {
	return n.b.st.run(ctx, func(t tx) error {
		res, err := t.exec(ctx, `INSERT INTO nonces (key, nonce, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, c.Key, c.Nonce, c.Time.UnixNano())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			return fmt.Errorf("%w (signed %s)", wire.ErrReplay, c.Time.UTC().Format(time.RFC3339Nano))
		}
		return nil
	})
}
