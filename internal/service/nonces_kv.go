package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// KVNonces keeps nonces in a JetStream KV bucket (MRM_NONCES, see
// natsutil.EnsureNonces) shared by every replica of a service: a nonce is
// a key created atomically, so a request replayed to another replica, or
// after a restart, finds its key and is refused. The bucket's TTL forgets
// nonces once their signatures are stale. A bucket that cannot be reached
// refuses the request (unavailable): a replay check that cannot be made is
// not passed.
type KVNonces struct {
	KV jetstream.KeyValue
	// NC, when set, is the connection KV is on: a create in flight when it
	// loses its server is given up at once (natsutil.Bounded).
	NC *nats.Conn
}

// NonceKey is the bucket key of c's nonce: a hash of signer and nonce
// (nonces may hold characters keys may not).
func NonceKey(c signing.Caller) string {
	sum := sha256.Sum256([]byte(c.Key + "\x00" + c.Nonce))
	return "n." + hex.EncodeToString(sum[:20])
}

// Use records c's nonce; signing.ErrReplay if any replica recorded it before.
func (n KVNonces) Use(ctx context.Context, c signing.Caller, _ time.Time) error {
	// One attempt: a create lost with the bucket's leader would otherwise
	// hold the request until its deadline (natsutil.Bounded).
	_, err := natsutil.Bounded(n.KV, n.NC, rpc.DaemonAttempt).Create(ctx, NonceKey(c), []byte(strconv.FormatInt(c.Time.UnixNano(), 10)))
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return fmt.Errorf("%w (signed %s)", signing.ErrReplay, c.Time.UTC().Format(time.RFC3339Nano))
	case err != nil:
		return fmt.Errorf("%w: nonce store: %v", wire.ErrUnavailable, err)
	}
	return nil
}
