package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
)

// TestCommitRecords: a host's commitment record is written only over the
// revision last read (a new one only where there is none); pricing counts
// a job a record lists until its plan record of that admission appears,
// or until it is startingTimeout old; uncommit takes an admission off;
// and a record that does not open counts as empty and is overwritten.
// Over the in-memory store and the MRM_PLANS bucket alike.
func TestCommitRecords(t *testing.T) {
	ctx := context.Background()
	_, nc := natstest.Start(t)
	plans := natstest.Assets(t, nc).Plans
	for _, kv := range []bool{false, true} {
		clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
		cfg := Config{Agents: noAgents{}, Bank: &recBank{held: map[string]money.Micro{}, released: map[string]money.Micro{}},
			Now: func() time.Time { return clock }, Replica: "r1"}
		if kv {
			cfg.Plans = plans
		}
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		rec, rev, err := b.store.commitments(ctx, "host-1")
		if err != nil || rev != 0 || len(rec.Jobs) != 0 {
			t.Fatalf("kv=%v: a new host's record: %+v %d %v", kv, rec, rev, err)
		}
		x := commitment{Plan: "x", Token: "tx", Work: 80, Deadline: clock.Add(time.Minute), Admitted: clock}
		rec.Jobs = append(rec.Jobs, x)
		r1, err := b.store.commit(ctx, rec, 0)
		if err != nil {
			t.Fatalf("kv=%v: first write: %v", kv, err)
		}
		if _, err := b.store.commit(ctx, rec, 0); !errors.Is(err, errStale) {
			t.Fatalf("kv=%v: a second first write: %v", kv, err)
		}
		if _, err := b.store.commit(ctx, rec, r1+1000); !errors.Is(err, errStale) {
			t.Fatalf("kv=%v: a write over the wrong revision: %v", kv, err)
		}

		// x has no plan record yet: it counts, but not for plan x itself.
		hosts := map[string]bool{"host-1": true}
		hc, err := b.readCommits(ctx, hosts)
		if err != nil || hc.revs["host-1"] != r1 {
			t.Fatalf("kv=%v: read %+v %v", kv, hc, err)
		}
		if q := b.committed(clock, hosts, hc.pending(planRef{})); len(q) != 1 || q[0].Work != 100 {
			t.Fatalf("kv=%v: queue with x pending: %+v", kv, q)
		}
		if p := hc.pending(planRef{id: "x"}); len(p) != 0 {
			t.Fatalf("kv=%v: x's own pricing sees %+v", kv, p)
		}
		// Another admission commits y over the revision read; x stays.
		y := commitment{Plan: "y", Token: "ty", Work: 40, Deadline: clock.Add(5 * time.Minute), Admitted: clock}
		if err := b.commit(ctx, hc, y, clock); err != nil {
			t.Fatalf("kv=%v: committing y: %v", kv, err)
		}
		if err := b.commit(ctx, hc, y, clock); !errors.Is(err, errStale) {
			t.Fatalf("kv=%v: committing over a stale read: %v", kv, err)
		}
		// y fails: it comes off; x, never recorded, stops counting once stale.
		b.uncommit(ctx, []string{"host-1"}, "ty")
		rec, _, _ = b.store.commitments(ctx, "host-1")
		if len(rec.Jobs) != 1 || rec.Jobs[0].Token != "tx" {
			t.Fatalf("kv=%v: after uncommitting y: %+v", kv, rec.Jobs)
		}
		clock = clock.Add(startingTimeout)
		hc, _ = b.readCommits(ctx, hosts)
		if q := b.committed(clock, hosts, hc.pending(planRef{})); len(q) != 0 || b.counts(x, clock) {
			t.Fatalf("kv=%v: a stale pending job still counts: %+v", kv, q)
		}
		if !kv {
			continue
		}
		// Garbage under the key counts as empty, at its revision, and is
		// overwritten by the next commit.
		grev, err := plans.Put(ctx, commitKey("host-1"), []byte("not a record"))
		if err != nil {
			t.Fatal(err)
		}
		rec, rev, err = b.store.commitments(ctx, "host-1")
		if err != nil || rev != grev || len(rec.Jobs) != 0 || b.Damage().Refused == 0 {
			t.Fatalf("a garbage record: %+v %d (want %d) %v %+v", rec, rev, grev, err, b.Damage())
		}
		hc, _ = b.readCommits(ctx, hosts)
		if err := b.commit(ctx, hc, x, clock); err != nil {
			t.Fatalf("committing over garbage: %v", err)
		}
	}
}
