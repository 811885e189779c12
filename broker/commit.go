package broker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// Deadline commitments per host, so admission is safe across replicas.
//
// Every host has a commitment record in the plan store (key
// "commit.<host>" in MRM_PLANS, sealed for CommitPurpose(host) like a plan
// record): the deadline jobs admitted on it, each with the work and
// deadline it was admitted at and a token of its admission. A submit
// reads the records of the job's hosts with their revisions, prices the
// job against MRM's queue — the plans' jobs as the store has them, plus
// every job a record lists whose plan record (of that admission) the
// replica has not seen yet — and then writes the job into each record,
// in host order, by compare-and-set over the revision it read. If any
// record changed meanwhile another admission on that host won: the
// submit reads and prices again (its deadline may no longer be met, or
// its price is higher), at most maxAdmitTries times, and only then
// holds money. So of two admissions racing on a host the second always
// priced with the first in its queue, as if they had come one after the
// other.
//
// A record lists a job until its plan is seen ended, or for
// startingTimeout after its admission if no plan record of it appears
// (its replica died between committing and recording it; recover.go
// releases whatever it held). Writers drop such entries. A job whose
// admission failed after committing is taken out again (uncommit) —
// and if that fails too, its plan record, failed, says it no longer
// counts. A record lost (a deleted key, a recreated bucket) loses only
// the jobs not yet in the plan records; one that fails its seal counts
// as empty, is reported, and is overwritten by the next admission.

// maxAdmitTries is how many times a submit prices and tries to commit
// before it gives up to the admissions that keep winning.
const maxAdmitTries = 5

// ErrAdmitRace refuses a submit that lost the race to commit its hosts
// maxAdmitTries times; nothing is held, and it may simply be retried.
var ErrAdmitRace = fmt.Errorf("%w: other admissions on the job's hosts kept committing first; try again", wire.ErrConflict)

// CommitPurpose is the seal purpose of host's commitment record.
func CommitPurpose(host string) string { return "commit/" + host }

// commitment is an admitted job on a host's commitment record.
type commitment struct {
	Plan string `json:"plan"`
	// User is the plan's user (plan ids are each user's); empty in an
	// entry written before they were.
	User string `json:"user,omitempty"`
	// Token names the admission: a plan id used again (after a failed
	// spend) is another admission.
	Token    string    `json:"token"`
	Work     float64   `json:"work"` // seconds at a full share
	Deadline time.Time `json:"deadline"`
	Admitted time.Time `json:"admitted"`
}

// commitRec is a host's commitment record.
type commitRec struct {
	Host string       `json:"host"`
	Jobs []commitment `json:"jobs"`
}

func (c *commitRec) clone() *commitRec {
	out := *c
	out.Jobs = slices.Clone(c.Jobs)
	return &out
}

// hostCommits is what a pricing read of the commitment records: each of
// the job's hosts (sorted), its record and the revision read (0: none).
type hostCommits struct {
	hosts []string
	recs  map[string]*commitRec
	revs  map[string]uint64
}

// readCommits reads the commitment records of hosts.
func (b *Broker) readCommits(ctx context.Context, hosts map[string]bool) (*hostCommits, error) {
	hc := &hostCommits{recs: map[string]*commitRec{}, revs: map[string]uint64{}}
	for h := range hosts {
		hc.hosts = append(hc.hosts, h)
	}
	slices.Sort(hc.hosts)
	for _, h := range hc.hosts {
		rec, rev, err := b.store.commitments(ctx, h)
		if err != nil {
			return nil, err
		}
		hc.recs[h], hc.revs[h] = rec, rev
	}
	return hc, nil
}

// pending are the jobs the records list, once each, but those of plan ref
// (the admission's own entry, when it prices again after a lost race, or
// another admission of the same plan: only one of them can start it).
func (hc *hostCommits) pending(ref planRef) []commitment {
	var out []commitment
	seen := map[string]bool{}
	for _, h := range hc.hosts {
		for _, c := range hc.recs[h].Jobs {
			ours := c.Plan == ref.id && (c.User == ref.user || c.User == "")
			if !ours && !seen[c.Token] {
				seen[c.Token] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// committed lists the admitted deadline jobs not yet done whose VMs share a
// host with hosts: MRM's queue, each with the time it still needs at the
// reserved share and its deadline, in seconds from now, in deadline order.
// The jobs are the plans' as the store has them, and those of pending (from
// the hosts' commitment records) whose plan record of that admission the
// store does not have yet, unless startingTimeout old. A job behind its
// estimate is due when EDF can finish it, not before: it is committed, and
// the queue after it must still fit.
func (b *Broker) committed(now time.Time, hosts map[string]bool, pending []commitment) []strategies.Queued {
	var q []strategies.Queued
	phi := b.cfg.DeadlineShare
	recorded := map[string]bool{} // the admission tokens of the jobs the store has
	b.store.each(func(rec *planRecord, _ uint64) {
		j := rec.Job
		if j == nil {
			return
		}
		recorded[j.Commit] = j.Commit != ""
		if !rec.liveJob(now) || j.Deadline.IsZero() {
			return
		}
		if !slices.ContainsFunc(rec.Plan.VMs, func(v wire.PlanVM) bool { return hosts[v.Host] }) {
			return
		}
		q = append(q, strategies.Queued{Work: j.Work * (1 - j.Progress) / phi, Deadline: j.Deadline.Sub(now).Seconds()})
	})
	for _, c := range pending {
		if recorded[c.Token] || stalePending(c, now) {
			continue
		}
		q = append(q, strategies.Queued{Work: c.Work / phi, Deadline: c.Deadline.Sub(now).Seconds()})
	}
	sortQueue(q)
	done := 0.0
	for i := range q {
		done += q[i].Work
		q[i].Deadline = max(q[i].Deadline, done)
	}
	return q
}

func sortQueue(q []strategies.Queued) {
	slices.SortStableFunc(q, func(a, b strategies.Queued) int {
		switch {
		case a.Deadline < b.Deadline:
			return -1
		case a.Deadline > b.Deadline:
			return 1
		}
		return 0
	})
}

// stalePending reports whether c, admitted startingTimeout ago, has no
// plan record by now: its replica died before writing it.
func stalePending(c commitment, now time.Time) bool {
	return !now.Before(c.Admitted.Add(startingTimeout))
}

// counts reports whether c still belongs on its hosts' records: its job
// (of that admission) is live (liveJob), or no
// plan record of it has appeared yet and it is not stale.
func (b *Broker) counts(c commitment, now time.Time) bool {
	v, ok := b.admitted(c)
	if !ok || v.rec.Job == nil || v.rec.Job.Commit != c.Token {
		return !stalePending(c, now)
	}
	return v.rec.liveJob(now)
}

// admitted is the plan record of c's plan, found by its user and id, or
// for an entry from before plan ids were each user's, by its id and
// admission token.
func (b *Broker) admitted(c commitment) (versioned, bool) {
	if c.User != "" {
		return b.store.get(planRef{c.User, c.Plan})
	}
	var found versioned
	b.store.each(func(rec *planRecord, rev uint64) {
		if rec.Plan.ID == c.Plan && rec.Job != nil && rec.Job.Commit == c.Token {
			found = versioned{rec.clone(), rev}
		}
	})
	return found, found.rec != nil
}

// commit writes c into the commitment record of every host hc read, in
// host order, each by compare-and-set over the revision read (replacing
// an entry of c's admission a lost race left, dropping those that no
// longer count): errStale when another admission wrote one first.
func (b *Broker) commit(ctx context.Context, hc *hostCommits, c commitment, now time.Time) error {
	for _, h := range hc.hosts {
		rec := &commitRec{Host: h}
		for _, o := range hc.recs[h].Jobs {
			if o.Token != c.Token && b.counts(o, now) {
				rec.Jobs = append(rec.Jobs, o)
			}
		}
		rec.Jobs = append(rec.Jobs, c)
		if _, err := b.store.commit(ctx, rec, hc.revs[h]); err != nil {
			return err
		}
	}
	return nil
}

// uncommit takes the admission token off hosts' commitment records, for
// an admission that committed (some of) them and then failed. It is best
// effort: a failed plan record, or the entry's age, takes it out anyway.
func (b *Broker) uncommit(ctx context.Context, hosts []string, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rpc.DefaultTimeout)
	defer cancel()
	for _, h := range hosts {
		for range maxAdmitTries {
			rec, rev, err := b.store.commitments(ctx, h)
			if err != nil || !slices.ContainsFunc(rec.Jobs, func(c commitment) bool { return c.Token == token }) {
				break
			}
			rec.Jobs = slices.DeleteFunc(rec.Jobs, func(c commitment) bool { return c.Token == token })
			if _, err := b.store.commit(ctx, rec, rev); !errors.Is(err, errStale) {
				if err != nil {
					b.cfg.Metrics.Error("broker", "uncommit")
				}
				break
			}
		}
	}
}

// The stores' commitment records.

func (s *memStore) commitments(_ context.Context, host string) (*commitRec, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.commits[host]
	if !ok {
		return &commitRec{Host: host}, 0, nil
	}
	return v.rec.clone(), v.rev, nil
}

func (s *memStore) commit(_ context.Context, rec *commitRec, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commits[rec.Host].rev != rev {
		return 0, errStale
	}
	s.rev++
	s.commits[rec.Host] = versionedCommit{rec.clone(), s.rev}
	return s.rev, nil
}

// versionedCommit is a commitment record with its revision.
type versionedCommit struct {
	rec *commitRec
	rev uint64
}

const commitPrefix = "commit."

// commitKey is host's commitment record's key.
func commitKey(host string) string {
	return commitPrefix + base64.RawURLEncoding.EncodeToString([]byte(host))
}

// commitments reads host's record from the bucket itself, not the mirror:
// a compare-and-set needs the revision stored now.
func (s *kvStore) commitments(ctx context.Context, host string) (*commitRec, uint64, error) {
	e, err := s.bucket().Get(ctx, commitKey(host))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &commitRec{Host: host}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%w: plan store: %v", wire.ErrUnavailable, err)
	}
	rec := &commitRec{Host: host}
	body, err := s.unseal(CommitPurpose(host), e.Value())
	if err == nil {
		err = json.Unmarshal(body, rec)
	}
	if err == nil && rec.Host != host {
		err = fmt.Errorf("%w: commitments of host %q under the key of %q", signing.ErrWrongPlace, rec.Host, host)
	}
	if err != nil {
		// Counted as empty: the plan records still hold every job but those
		// being admitted now; the next admission overwrites it.
		s.refused.Add(1)
		s.metrics.Error("broker", "forged_commitments")
		s.logger.Warn("broker: commitment record refused", "host", host, "err", err)
		return &commitRec{Host: host}, e.Revision(), nil
	}
	return rec, e.Revision(), nil
}

func (s *kvStore) commit(ctx context.Context, rec *commitRec, rev uint64) (uint64, error) {
	body, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	data, err := s.seal(CommitPurpose(rec.Host), body)
	if err != nil {
		return 0, err
	}
	var nrev uint64
	if rev == 0 {
		nrev, err = s.bucket().Create(ctx, commitKey(rec.Host), data)
	} else {
		nrev, err = s.bucket().Update(ctx, commitKey(rec.Host), data, rev)
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyExists) || natsutil.WrongLastSequence(err):
		return 0, errStale
	case err != nil:
		return 0, fmt.Errorf("%w: plan store: %v", wire.ErrUnavailable, err)
	}
	return nrev, nil
}
