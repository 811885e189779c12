package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Sealed plan records. The plan bucket is shared storage anyone with
// JetStream access could write; what the broker runs must be what a broker
// wrote. With a Signer each record is stored as a wire.Sealed of purpose
// PlanPurpose(id); with Identities each record read is opened for its own
// key's id and its signer must be a broker principal. A record that fails
// (unsigned, forged, sealed for another plan, by a non-broker) is refused:
// counted (metric broker error "forged_plan", PlanStoreDamage), logged and
// never run. A plan key deleted or purged is counted ("plan_deleted") and
// logged. Either way, a plan the mirror knows is written back from it at
// the next Tick (kvStore.repair).

// PlanPurpose is the seal purpose of plan id's record.
func PlanPurpose(id string) string { return "plan/" + id }

// sealing is how a kvStore seals and opens records, and what it reports.
type sealing struct {
	signer  *signing.Signer    // nil: records are stored unsealed
	ids     service.Identities // nil: records are not verified
	whois   *service.WhoisCache
	now     func() time.Time
	metrics *obs.Metrics
	logger  *slog.Logger

	refused, deleted, bucketLost atomic.Int64

	mu      sync.Mutex
	damaged map[planRef]string // plan → what happened, to restore
}

// encode is rec as stored: sealed when there is a signer.
func (s *sealing) encode(rec *planRecord) ([]byte, error) {
	body, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return s.seal(PlanPurpose(rec.Plan.ID), body)
}

// seal is body as stored for purpose: sealed when there is a signer.
func (s *sealing) seal(purpose string, body []byte) ([]byte, error) {
	if s.signer == nil {
		return body, nil
	}
	return json.Marshal(s.signer.Seal(purpose, body))
}

// open reads the record stored for user's plan id (user "": a key from
// before plan ids were each user's, which names the id alone), checking
// its seal when the store verifies. The seal names the id; the key names
// the user too, so a broker's record of one user's plan put under another
// user's key of that id is refused.
func (s *sealing) open(user, id string, value []byte) (*planRecord, error) {
	body, err := s.unseal(PlanPurpose(id), value)
	if err != nil {
		return nil, err
	}
	var rec planRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		return nil, fmt.Errorf("%w: plan record: %v", signing.ErrBadSeal, err)
	}
	if rec.Plan.ID != id || user != "" && rec.Plan.User != user {
		return nil, fmt.Errorf("%w: record of %s's plan %q under the key of %s's %q", signing.ErrWrongPlace, rec.Plan.User, rec.Plan.ID, user, id)
	}
	return &rec, nil
}

// unseal is the body of a value stored for purpose: a sealed value's seal
// is checked (and with verification on, its signer must be a broker); an
// unsealed one is taken only without verification.
func (s *sealing) unseal(purpose string, value []byte) ([]byte, error) {
	var sealed wire.Sealed
	if json.Unmarshal(value, &sealed) == nil && sealed.Sig != "" {
		key, err := signing.Open(sealed, purpose)
		if err != nil {
			return nil, err
		}
		if s.ids != nil {
			if err := s.broker(key); err != nil {
				return nil, err
			}
		}
		return sealed.Body, nil
	} else if s.ids != nil {
		return nil, fmt.Errorf("%w: unsealed record (%s)", signing.ErrBadSeal, purpose)
	}
	return value, nil
}

// broker checks key is a broker's.
func (s *sealing) broker(key string) error {
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	p, ok := s.whois.Get(key, now())
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if p, err = s.ids.Whois(ctx, key); err != nil {
			return fmt.Errorf("%w: sealed by %s: %v", signing.ErrBadSeal, key, err)
		}
		s.whois.Put(key, p, now())
	}
	if p.Role != wire.RoleBroker {
		return fmt.Errorf("%w: sealed by %s (%s), not a broker", signing.ErrBadSeal, p.Name, p.Role)
	}
	return nil
}

// refuse reports a record that failed to open; known says the mirror has
// the plan to restore.
func (s *sealing) refuse(ref planRef, err error, known bool) {
	s.refused.Add(1)
	s.metrics.Error("broker", "forged_plan")
	s.report("plan record refused", ref, err)
	if known {
		s.markDamaged(ref, "refused")
	}
}

// lost reports a plan key deleted or purged.
func (s *sealing) lost(ref planRef, what string, known bool) {
	s.deleted.Add(1)
	s.metrics.Error("broker", "plan_deleted")
	s.report("plan record "+what, ref, nil)
	if known {
		s.markDamaged(ref, what)
	}
}

// report logs msg about plan (a planRef, or "*" for the whole bucket).
func (s *sealing) report(msg string, plan fmt.Stringer, err error) {
	if err != nil {
		s.logger.Warn("broker: "+msg, "plan", plan.String(), "err", err)
		return
	}
	s.logger.Warn("broker: "+msg, "plan", plan.String())
}

// allPlans stands for every plan in a report.
type allPlans struct{}

func (allPlans) String() string { return "*" }

func (s *sealing) markDamaged(ref planRef, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.damaged[ref] = what
}

func (s *sealing) takeDamaged() []planRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]planRef, 0, len(s.damaged))
	for ref := range s.damaged {
		out = append(out, ref)
	}
	clear(s.damaged)
	return out
}

// PlanStoreDamage is what the plan store refused and saw deleted since
// the broker started (records not sealed by a broker; plan keys deleted
// or purged; the bucket found deleted).
type PlanStoreDamage struct{ Refused, Deleted, BucketLost int64 }

// Damage reports the plan store's damage; zero without JetStream.
func (b *Broker) Damage() PlanStoreDamage {
	s, ok := b.store.(*kvStore)
	if !ok {
		return PlanStoreDamage{}
	}
	return PlanStoreDamage{Refused: s.refused.Load(), Deleted: s.deleted.Load(), BucketLost: s.bucketLost.Load()}
}

// recreatePlans has plans' bucket made again (by admin, when set) and
// opens it over nc; nil without a connection.
func recreatePlans(nc *nats.Conn, plans jetstream.KeyValue, admin func(context.Context) error) func(ctx context.Context) (jetstream.KeyValue, error) {
	if nc == nil {
		return nil
	}
	name := plans.Bucket()
	return func(ctx context.Context) (jetstream.KeyValue, error) {
		if admin != nil {
			if err := admin(ctx); err != nil {
				return nil, err
			}
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		return js.KeyValue(ctx, name)
	}
}
