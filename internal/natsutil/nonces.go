package natsutil

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// NonceTTL is how long MRM_NONCES keeps a nonce: past twice the signature
// skew, so a request is stale before its nonce is forgotten.
const NonceTTL = 2*signing.MaxSkew + signing.MaxSkew/2

// EnsureNonces creates (or opens) the MRM_NONCES bucket, whose keys expire
// after NonceTTL (service.KVNonces keeps the broker replicas' nonces
// there), with the replicas of replicas.go.
func EnsureNonces(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	return ensureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      wire.BucketNonces,
		Description: "nonces of the signed requests broker replicas served",
		History:     1,
		TTL:         NonceTTL,
	}, nil)
}
