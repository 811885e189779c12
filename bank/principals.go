package bank

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// ErrOlderRecord refuses a principal record sealed before the one the bank
// holds for the key: the newest record wins, and an old one replayed (a
// demoted principal's former record) changes nothing.
var ErrOlderRecord = fmt.Errorf("%w: principal record older than the registered one", wire.ErrConflict)

// AddPrincipal registers (or changes) an identity. A bank that knows its
// admin key (Options.AdminKey) takes only a registration carrying the
// admin's record of exactly it (wire.CheckPrincipalRequest), sealed no
// earlier than the record it holds; the admin key registers itself as
// admin without one. The record is kept and given out by Whois.
func (b *Bank) AddPrincipal(ctx context.Context, req *wire.PrincipalRequest) (wire.Principal, error) {
	if err := req.Validate(); err != nil {
		return wire.Principal{}, err
	}
	if b.adminKey != "" {
		if err := wire.CheckPrincipalRequest(req, b.adminKey); err != nil {
			return wire.Principal{}, err
		}
	}
	var cert sql.NullString
	var certTime int64
	if req.Cert != nil {
		j, err := json.Marshal(req.Cert)
		if err != nil {
			return wire.Principal{}, wire.Errorf(wire.ErrBadRequest, "principal record: %v", err)
		}
		cert, certTime = sql.NullString{String: string(j), Valid: true}, req.Cert.Time
	}
	p := wire.Principal{Key: req.Key, Name: req.Name, Role: req.Role, Cert: req.Cert}
	err := b.audited(ctx, func() any { return p }, func(t tx) error {
		var held int64
		var heldCert sql.NullString
		err := t.queryRow(ctx, `SELECT cert_time, cert FROM principals WHERE key = ?`, req.Key).Scan(&held, &heldCert)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case req.Cert == nil:
			// The anchor (or a bank without an admin key): keep the record held.
			cert, certTime = heldCert, held
			p.Cert = decodeCert(heldCert)
		case certTime < held:
			return fmt.Errorf("%w (%s: sealed %s, registered %s)", ErrOlderRecord, req.Key,
				time.Unix(0, certTime).UTC().Format(time.RFC3339Nano), time.Unix(0, held).UTC().Format(time.RFC3339Nano))
		}
		_, err = t.exec(ctx, `INSERT INTO principals (key, name, role, created, cert, cert_time) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET name = excluded.name, role = excluded.role, cert = excluded.cert, cert_time = excluded.cert_time`,
			req.Key, req.Name, req.Role, b.now().UnixNano(), cert, certTime)
		return err
	})
	if err != nil {
		return wire.Principal{}, err
	}
	b.mu.Lock()
	b.principals[p.Key] = p
	b.mu.Unlock()
	if b.onPrincipal != nil {
		b.onPrincipal(p)
	}
	return p, nil
}

// decodeCert is a stored record (nil if none or unreadable: whoever checks
// it then refuses the principal).
func decodeCert(s sql.NullString) *wire.Sealed {
	if !s.Valid || s.String == "" {
		return nil
	}
	var c wire.Sealed
	if json.Unmarshal([]byte(s.String), &c) != nil {
		return nil
	}
	return &c
}

// Whois finds the principal of a public key, with its record. The admin
// key (Options.AdminKey) is the admin even before it is registered.
func (b *Bank) Whois(ctx context.Context, key string) (wire.Principal, error) {
	b.mu.Lock()
	p, ok := b.principals[key]
	b.mu.Unlock()
	if ok {
		return p, nil
	}
	err := b.st.run(ctx, func(t tx) error {
		var cert sql.NullString
		err := t.queryRow(ctx, `SELECT key, name, role, cert FROM principals WHERE key = ?`, key).Scan(&p.Key, &p.Name, &p.Role, &cert)
		if errors.Is(err, sql.ErrNoRows) {
			if key == b.adminKey && key != "" {
				p = wire.Principal{Key: key, Name: "admin", Role: wire.RoleAdmin}
				return nil
			}
			return fmt.Errorf("%w %s", wire.ErrUnknownKey, key)
		}
		p.Cert = decodeCert(cert)
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
