package service

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// OwnRecord gives a component's own principal record, to attach to the
// replies it signs (Options.Cert): looked up through ids — Certified, so
// checked against the anchor adminKey — and kept once found; it must name
// signer's key with role (and name, unless name is ""). A miss (not yet
// registered, the registry slow or away) is asked again at most once a
// second, and replies go out without the record meanwhile rather than
// wait. nil when there is nothing to look up with: no ids, no anchor or no
// signer.
func OwnRecord(ids Identities, adminKey string, signer *signing.Signer, role, name string) func() *wire.Sealed {
	if ids == nil || adminKey == "" || signer == nil {
		return nil
	}
	var found atomic.Pointer[wire.Sealed]
	var miss atomic.Int64
	return func() *wire.Sealed {
		if c := found.Load(); c != nil {
			return c
		}
		if last := miss.Load(); last != 0 && time.Since(time.Unix(0, last)) < time.Second {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p, err := ids.Whois(ctx, signer.Public())
		if err != nil || p.Cert == nil || p.Role != role || name != "" && p.Name != name {
			miss.Store(time.Now().UnixNano())
			return nil
		}
		found.Store(p.Cert)
		return p.Cert
	}
}
