package attack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// ---- 06: the plans bucket ----

// plansKV is the MRM_PLANS bucket opened with the broker's own credentials
// (what a compromised broker host has).
func (e *env) plansKV(t *testing.T) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(e.dial(e.broker, "broker-kv").Conn)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(e.ctx, wire.BucketPlans)
	if err != nil {
		t.Fatalf("opening %s with the broker's key: %v", wire.BucketPlans, err)
	}
	return kv
}

// record is a plan record as stored: the record itself (inner) and, when
// the store seals records, the envelope around it.
type record struct {
	key      string
	raw      []byte
	envelope map[string]any // nil: an unsealed record
	inner    map[string]any
}

func decodeJSON(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	return m, d.Decode(&m)
}

// planRecord finds plan id's record in kv.
func planRecord(t *testing.T, e *env, kv jetstream.KeyValue, id string) record {
	t.Helper()
	keys, err := kv.ListKeys(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if !strings.HasPrefix(k, "plan") {
			continue
		}
		ent, err := kv.Get(e.ctx, k)
		if err != nil {
			continue
		}
		r := record{key: k, raw: ent.Value()}
		m, err := decodeJSON(ent.Value())
		if err != nil {
			continue
		}
		if body, ok := m["body"].(string); ok && m["sig"] != nil { // a sealed record: its body is base64
			var inner []byte
			if json.Unmarshal([]byte(`"`+body+`"`), &inner) != nil {
				continue
			}
			r.envelope = m
			if m, err = decodeJSON(inner); err != nil {
				continue
			}
		}
		if plan, ok := m["plan"].(map[string]any); ok && plan["id"] == id {
			r.inner = m
			return r
		}
	}
	t.Fatalf("no record of plan %s in %s", id, wire.BucketPlans)
	return record{}
}

// times100 multiplies a JSON number by 100.
func times100(v any) any {
	n, ok := v.(json.Number)
	if !ok {
		return v
	}
	i, err := n.Int64()
	if err != nil {
		return v
	}
	return json.Number(fmt.Sprint(i * 100))
}

// forge is r pointed at hold with its budget and its bids' ×100.
func (r record) forge(t *testing.T, hold string) []byte {
	t.Helper()
	b, _ := json.Marshal(r.inner)
	m, _ := decodeJSON(b) // a deep copy
	plan := m["plan"].(map[string]any)
	plan["hold"] = hold
	plan["budget_micro"] = times100(plan["budget_micro"])
	if vms, ok := plan["vms"].([]any); ok {
		for _, v := range vms {
			if vm, ok := v.(map[string]any); ok {
				vm["budget_micro"] = times100(vm["budget_micro"])
			}
		}
	}
	if bids, ok := m["bids"].(map[string]any); ok {
		for _, v := range bids {
			if bid, ok := v.(map[string]any); ok {
				bid["budget"] = times100(bid["budget"])
			}
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sealAs is body sealed by s, for the purpose r's envelope names (else
// "plan/<id>").
func (r record) sealAs(t *testing.T, s *signing.Signer, body []byte) []byte {
	t.Helper()
	b, err := json.Marshal(s.Seal(r.purpose(), body))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r record) purpose() string {
	if r.envelope != nil {
		if p, ok := r.envelope["purpose"].(string); ok {
			return p
		}
	}
	return "plan/" + r.inner["plan"].(map[string]any)["id"].(string)
}

// tampered is r's envelope (or, for an unsealed record, r sealed by
// broker) with its body replaced by body: the signature no longer matches.
func (r record) tampered(t *testing.T, broker *signing.Signer, body []byte) []byte {
	t.Helper()
	env := map[string]any{}
	for k, v := range r.envelope {
		env[k] = v
	}
	if r.envelope == nil {
		inner, _ := json.Marshal(r.inner)
		b, _ := json.Marshal(broker.Seal(r.purpose(), inner))
		env, _ = decodeJSON(b)
	}
	env["body"] = body
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// plansUser is the bucket attacked by a user: every write is the NATS
// server's to refuse.
func plansUserClass() class {
	user := func(do func(t *testing.T, e *env, r record) error) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			kv := e.plansKV(t)
			r := planRecord(t, e, kv, e.alicePlan.ID)
			if err := do(t, e, r); err != nil {
				t.Errorf("NATS: %v", err)
			}
			ent, err := kv.Get(e.ctx, r.key)
			if err != nil || !bytes.Equal(ent.Value(), r.raw) {
				t.Errorf("alice's plan record is gone or changed: %v", err)
			}
		}
	}
	kvSubject := func(key string) string { return "$KV." + wire.BucketPlans + "." + key }
	return class{name: "06-plans-kv-user", attacks: []attack{
		{"alice-puts-forged-record", user(func(t *testing.T, e *env, r record) error {
			return jsRefused(e.aliceNC, kvSubject(r.key), nil, r.forge(t, e.bobPlan.Hold))
		})},
		{"alice-opens-bucket-via-jetstream-api", user(func(t *testing.T, e *env, r record) error {
			return jsRefused(e.aliceNC, "$JS.API.STREAM.INFO.KV_"+wire.BucketPlans, nil, nil)
		})},
		{"alice-deletes-plan-key", user(func(t *testing.T, e *env, r record) error {
			return jsRefused(e.aliceNC, kvSubject(r.key), nats.Header{"KV-Operation": {"DEL"}}, nil)
		})},
		{"alice-purges-plan-key", user(func(t *testing.T, e *env, r record) error {
			return jsRefused(e.aliceNC, kvSubject(r.key), nats.Header{"KV-Operation": {"PURGE"}, "Nats-Rollup": {"sub"}}, nil)
		})},
		{"alice-purges-bucket", user(func(t *testing.T, e *env, r record) error {
			return jsRefused(e.aliceNC, "$JS.API.STREAM.PURGE.KV_"+wire.BucketPlans, nil, nil)
		})},
		{"alice-deletes-bucket", user(func(t *testing.T, e *env, r record) error {
			return jsRefused(e.aliceNC, "$JS.API.STREAM.DELETE.KV_"+wire.BucketPlans, nil, nil)
		})},
	}}
}

// spentWithin fails t if user spent more than a plan of budget started at
// t0 may have by now (its constant rate; one tick of slack).
func (e *env) spentWithin(t *testing.T, user string, budget money.Micro) {
	t.Helper()
	elapsed := e.now().Sub(t0) + tick
	limit := money.Micro(float64(budget) * min(1, elapsed.Seconds()/planLength.Seconds()))
	if b := e.balance(user); b.Spent > limit {
		t.Errorf("%s spent %s, more than the %s her plan allows by now", user, b.Spent, limit)
	}
}

// planIntact fails t unless the broker still runs plan p as it started.
func (e *env) planIntact(t *testing.T, p wire.Plan) {
	t.Helper()
	for _, got := range e.m.Broker.Plans(&wire.PlansRequest{User: p.User}).Plans {
		if got.ID != p.ID {
			continue
		}
		if got.Hold != p.Hold || got.Budget != p.Budget || got.Status != wire.PlanRunning {
			t.Errorf("plan %s is now hold %s budget %s %s; it started as hold %s budget %s", p.ID, got.Hold, got.Budget, got.Status, p.Hold, p.Budget)
		}
		return
	}
	t.Errorf("plan %s is no longer listed", p.ID)
}

// plansBroker is the bucket written with the broker's own credentials: the
// server lets it, so the records themselves must carry the defence.
func plansBrokerClass() class {
	forged := func(write func(t *testing.T, e *env, kv jetstream.KeyValue, r record) []byte) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			kv := e.plansKV(t)
			r := planRecord(t, e, kv, e.alicePlan.ID)
			if data := write(t, e, kv, r); data != nil {
				if _, err := kv.Put(e.ctx, r.key, data); err != nil {
					t.Logf("the bucket refused the forged record: %v", err)
				}
			}
			for range 3 {
				e.advance(tick)
			}
			e.planIntact(t, e.alicePlan)
			e.planIntact(t, e.bobPlan)
			e.bidsOnOwnHolds(t)
			e.spentWithin(t, "alice", e.alicePlan.Budget)
			e.spentWithin(t, "bob", e.bobPlan.Budget)
			if ent, err := kv.Get(e.ctx, r.key); err != nil {
				t.Errorf("alice's plan record is not restored in %s: %v", wire.BucketPlans, err)
			} else if bytes.Contains(ent.Value(), []byte(e.bobPlan.Hold)) {
				t.Errorf("alice's plan record still names bob's hold")
			}
		}
	}
	return class{name: "06-plans-kv-broker", ticks: true, attacks: []attack{
		{"unsigned-record-alice-on-bobs-hold-budget-x100", forged(func(t *testing.T, e *env, _ jetstream.KeyValue, r record) []byte {
			return r.forge(t, e.bobPlan.Hold)
		})},
		{"tampered-sealed-record", forged(func(t *testing.T, e *env, _ jetstream.KeyValue, r record) []byte {
			return r.tampered(t, e.broker, r.forge(t, e.bobPlan.Hold))
		})},
		{"record-sealed-by-alice", forged(func(t *testing.T, e *env, _ jetstream.KeyValue, r record) []byte {
			return r.sealAs(t, e.alice, r.forge(t, e.bobPlan.Hold))
		})},
		{"record-sealed-by-host-1-agent", forged(func(t *testing.T, e *env, _ jetstream.KeyValue, r record) []byte {
			return r.sealAs(t, e.agents["host-1"], r.forge(t, e.bobPlan.Hold))
		})},
		{"plan-key-deleted", forged(func(t *testing.T, e *env, kv jetstream.KeyValue, r record) []byte {
			if err := kv.Delete(e.ctx, r.key); err != nil {
				t.Fatal(err)
			}
			return nil
		})},
	}}
}
