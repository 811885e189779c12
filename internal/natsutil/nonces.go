package natsutil

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// EnsureNonces creates (or opens) the MRM_NONCES bucket alone, whose keys
// expire after NonceTTL (service.KVNonces keeps the broker replicas'
// nonces there), with the replicas of replicas.go. EnsureAssets makes it
// with the others; this is for an open server (tests).
func EnsureNonces(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	return ensureKV(ctx, js, noncesConfig, map[string]int{})
}
