package bank

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Revoking and rotating keys. A revocation is stored as the key's newest
// record (the admin's, sealed revoked) with when it happened; it is final
// (AddPrincipal refuses the key for good). Once committed the key is
// nobody: the bank's Whois refuses it (its own requests, and everyone who
// asks), OnPrincipal reloads the embedded NATS server's users without it
// (its connections close), and the bank announces it on
// wire.RegistryRevoked so every service forgets the key at once (Serve).
// What else a revocation does depends on why the key goes:
//   - revoked (stolen or retired): a user's open holds are released to its
//     account in the same transaction — a plan's bids can capture nothing
//     more — and an agent's host is retired by the brokers hearing the
//     notice (no successor);
//   - rotated: the principal's new key is registered in the same
//     transaction; its accounts, holds and plans are by name and stay, and
//     its host stays up.

// RevokePrincipal revokes req.Key. A bank that knows its admin key takes
// only the admin's revocation record of exactly that principal, sealed no
// earlier than the record it holds; the anchor itself is never revoked,
// nor, without an anchor, the last live admin key (ErrLastAdmin). A key
// revoked already is answered as it is (a retry).
func (b *Bank) RevokePrincipal(ctx context.Context, req *wire.RevokeRequest) (wire.RevokeReply, error) {
	if err := req.Validate(); err != nil {
		return wire.RevokeReply{}, err
	}
	if b.adminKey != "" {
		if err := signing.CheckRevokeRequest(req, b.adminKey); err != nil {
			return wire.RevokeReply{}, err
		}
	}
	cert, certTime, err := certColumn(req.Cert)
	if err != nil {
		return wire.RevokeReply{}, err
	}
	var rep wire.RevokeReply
	var done bool // revoked by this request (not before)
	err = b.audited(ctx, func() any { return rep }, func(t tx) error {
		rep, done = wire.RevokeReply{}, false
		r, err := b.revocable(ctx, t, req.Key, req.Name, req.Role, certTime)
		if err != nil || r.revoked != 0 {
			rep.Principal = r.info()
			return err
		}
		if req.Role == wire.RoleAdmin {
			if err := b.notLastAdmin(ctx, t, req.Key); err != nil {
				return err
			}
		}
		if r, err = b.markRevoked(ctx, t, r, cert, certTime, ""); err != nil {
			return err
		}
		rep.Principal, done = r.info(), true
		if req.Role == wire.RoleUser {
			rep.Released, rep.ReleasedAmount, err = b.releaseAll(ctx, t, req.Name)
		}
		return err
	})
	if err != nil {
		return wire.RevokeReply{}, err
	}
	if done {
		b.revoked(wire.RevokedNotice{Key: req.Key, Name: req.Name, Role: req.Role, Record: req.Cert})
	}
	return rep, nil
}

// RotatePrincipal gives principal req.Name (req.Role) the key req.Key in
// place of req.Old, in one transaction: the new key registered with the
// admin's record of it, the old one revoked with the admin's revocation
// record (sealed no earlier than the one held). Nothing of the principal's
// moves: its accounts, holds and plans are by name. A rotation done
// already (the old key replaced by this new one) is answered as it is.
func (b *Bank) RotatePrincipal(ctx context.Context, req *wire.RotateRequest) (wire.RotateReply, error) {
	if err := req.Validate(); err != nil {
		return wire.RotateReply{}, err
	}
	if b.adminKey != "" {
		if err := signing.CheckRotateRequest(req, b.adminKey); err != nil {
			return wire.RotateReply{}, err
		}
	}
	oldCert, oldTime, err := certColumn(req.OldCert)
	if err != nil {
		return wire.RotateReply{}, err
	}
	cert, certTime, err := certColumn(req.Cert)
	if err != nil {
		return wire.RotateReply{}, err
	}
	var rep wire.RotateReply
	var done bool
	err = b.audited(ctx, func() any { return rep }, func(t tx) error {
		rep, done = wire.RotateReply{}, false
		old, err := b.revocable(ctx, t, req.Old, req.Name, req.Role, oldTime)
		if err != nil {
			return err
		}
		if old.revoked != 0 {
			if old.replacedBy != req.Key {
				return fmt.Errorf("%w: %s was revoked already", signing.ErrRevoked, req.Old)
			}
			cur, err := readPrincipal(ctx, t, req.Key)
			rep.Old, rep.New = old.info(), cur.info()
			return err
		}
		switch held, err := readPrincipal(ctx, t, req.Key); {
		case err == nil && held.revoked != 0:
			return fmt.Errorf("%w: the new key %s was revoked", signing.ErrRevoked, req.Key)
		case err == nil:
			return fmt.Errorf("%w: the new key %s is registered already (%s %s)", wire.ErrConflict, req.Key, held.role, held.name)
		case !errors.Is(err, ErrUnknownPrincipal):
			return err
		}
		now := b.now().UnixNano()
		if _, err := t.exec(ctx, `INSERT INTO principals (key, name, role, created, cert, cert_time) VALUES (?, ?, ?, ?, ?, ?)`,
			req.Key, req.Name, req.Role, now, cert, certTime); err != nil {
			return err
		}
		if old, err = b.markRevoked(ctx, t, old, oldCert, oldTime, req.Key); err != nil {
			return err
		}
		cur, err := readPrincipal(ctx, t, req.Key)
		rep.Old, rep.New, done = old.info(), cur.info(), true
		return err
	})
	if err != nil {
		return wire.RotateReply{}, err
	}
	if done {
		b.remember(wire.Principal{Key: req.Key, Name: req.Name, Role: req.Role, Cert: req.Cert}, false)
		b.revoked(wire.RevokedNotice{Key: req.Old, Name: req.Name, Role: req.Role, Record: req.OldCert, Successor: req.Key, SuccessorRecord: req.Cert})
	}
	return rep, nil
}

// revocable reads key's row and checks that a revocation sealed at
// certTime may revoke it: it is principal name with role, and the record
// it holds is no newer. A row revoked already is returned as it is.
func (b *Bank) revocable(ctx context.Context, t tx, key, name, role string, certTime int64) (principalRow, error) {
	r, err := readPrincipal(ctx, t, key)
	switch {
	case err != nil:
		return r, err
	case r.revoked != 0:
		return r, nil
	case r.name != name || r.role != role:
		return r, fmt.Errorf("%w: %s is %s %s, not %s %s", wire.ErrConflict, key, r.role, r.name, role, name)
	case b.adminKey != "" && certTime < r.certTime:
		return r, fmt.Errorf("%w (%s: revocation sealed %s, registered %s)", ErrOlderRecord, key, stampNs(certTime), stampNs(r.certTime))
	}
	return r, nil
}

// notLastAdmin refuses revoking key when no other admin key would be
// left: the anchor (with one), or another live admin.
func (b *Bank) notLastAdmin(ctx context.Context, t tx, key string) error {
	if b.adminKey != "" {
		return nil // the anchor stays the admin, and is never revoked
	}
	var n int
	if err := t.queryRow(ctx, `SELECT count(*) FROM principals WHERE role = ? AND revoked = 0 AND key <> ?`, wire.RoleAdmin, key).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w (%s): register another admin first", ErrLastAdmin, key)
	}
	return nil
}

// markRevoked stores r revoked now, with its revocation record and the
// key replacing it (a rotation; "" for none).
func (b *Bank) markRevoked(ctx context.Context, t tx, r principalRow, cert sql.NullString, certTime int64, replacedBy string) (principalRow, error) {
	r.revoked, r.replacedBy, r.certTime = b.now().UnixNano(), replacedBy, certTime
	_, err := t.exec(ctx, `UPDATE principals SET revoked = ?, replaced_by = ?, cert = ?, cert_time = ? WHERE key = ? AND revoked = 0`,
		r.revoked, replacedBy, cert, certTime, r.key)
	return r, err
}

// releaseAll releases every open hold of user: a revoked user's plans can
// capture nothing more, and its money is back in its account.
func (b *Bank) releaseAll(ctx context.Context, t tx, user string) ([]string, money.Micro, error) {
	var open []wire.HoldInfo
	err := eachRow(ctx, t, func(r *sql.Rows) error {
		h, err := scanHold(r)
		if err == nil {
			open = append(open, h)
		}
		return err
	}, `SELECT `+holdColumns+` FROM holds WHERE user_id = ? AND status = 'open' ORDER BY id`, user)
	if err != nil {
		return nil, 0, err
	}
	var ids []string
	var total money.Micro
	for _, h := range open {
		n, err := b.release(ctx, t, h, "release")
		if err != nil {
			return nil, 0, err
		}
		ids, total = append(ids, h.ID), total+n
	}
	return ids, total, nil
}

// revoked is what follows a committed revocation: the key is remembered
// as revoked, the embedded NATS server reloads its users (OnPrincipal) and
// the revocation is announced (Serve's notify).
func (b *Bank) revoked(n wire.RevokedNotice) {
	b.remember(wire.Principal{Key: n.Key, Name: n.Name, Role: n.Role, Cert: n.Record}, true)
	if b.onPrincipal != nil {
		b.onPrincipal(wire.Principal{Key: n.Key, Name: n.Name, Role: n.Role, Cert: n.Record})
	}
	b.mu.Lock()
	notify := b.notify
	b.mu.Unlock()
	if notify != nil {
		notify(n)
	}
}
