package wire_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// FuzzDecode feeds arbitrary bytes to the strict decoder of every request
// type: it must never panic, and whatever it accepts must be valid and
// within the bounds the bank relies on (positive amounts ≤ money.Max, legs
// and VMs within their limits).
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"id":"g1","user":"alice","amount_micro":100}`,
		`{"v":1,"id":"h1","user":"alice","amount_micro":5,"expires":"2026-01-01T00:00:00Z","hosts":["host-1"]}`,
		`{"v":1,"host":"host-1","tick":3,"legs":[{"id":"h/host-1/vm/3","hold":"h","vm":"vm","cumulative":7}]}`,
		`{"v":1,"id":"t1","from":"alice","to":"bob","amount_micro":1}`,
		`{"v":1,"user":"*","amount_micro":1000,"every":"24h"}`,
		`{"v":1,"user":"alice","budget_micro":10,"duration":"1h","vms":["a1"],"strategy":"fair"}`,
		`{"v":1,"set":[{"vm":"a","owner":"alice","plan":"p","hold":"h","budget_micro":5,"duration":"1m"}]}`,
		`{"v":1,"amount_micro":-1}`, `{"v":1,"amount_micro":9223372036854775807}`, `{"v":1,"amount_micro":1e400}`,
		`{"v":2}`, `[]`, `null`, ``, `{"v":1}{"v":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		amounts := func(ms ...money.Micro) {
			for _, m := range ms {
				if m <= 0 || m > money.Max {
					t.Fatalf("accepted amount %d from %q", m, data)
				}
			}
		}
		if r := new(wire.GrantRequest); wire.Decode(data, r) == nil {
			amounts(r.Amount)
		}
		if r := new(wire.HoldRequest); wire.Decode(data, r) == nil {
			amounts(r.Amount)
			if r.Expires.IsZero() || len(r.Hosts) > wire.MaxHoldHosts {
				t.Fatalf("accepted hold %+v", r)
			}
		}
		if r := new(wire.CaptureBatch); wire.Decode(data, r) == nil {
			if len(r.Legs) == 0 || len(r.Legs) > wire.MaxLegs {
				t.Fatalf("accepted %d legs", len(r.Legs))
			}
			for _, l := range r.Legs {
				amounts(l.Cumulative)
			}
		}
		if r := new(wire.TransferRequest); wire.Decode(data, r) == nil {
			amounts(r.Amount)
			if r.From == r.To {
				t.Fatalf("accepted a transfer to oneself")
			}
		}
		if r := new(wire.IncomeSetRequest); wire.Decode(data, r) == nil && r.Amount != 0 {
			amounts(r.Amount)
			if r.Every.D() < wire.MinIncomePeriod {
				t.Fatalf("accepted income every %s", r.Every.D())
			}
		}
		if r := new(wire.SpendRequest); wire.Decode(data, r) == nil {
			amounts(r.Budget)
			if r.Duration.D() <= 0 || len(r.VMs) == 0 {
				t.Fatalf("accepted spend %+v", r)
			}
		}
		if r := new(wire.BidRequest); wire.Decode(data, r) == nil {
			for _, b := range r.Set {
				amounts(b.Budget)
			}
		}
		if r := new(wire.BidBatch); wire.Decode(data, r) == nil {
			if len(r.Changes) == 0 || len(r.Changes) > wire.MaxBidBatch {
				t.Fatalf("accepted a batch of %d changes", len(r.Changes))
			}
			for i := range r.Changes {
				if r.Changes[i].Validate() == nil {
					for _, b := range r.Changes[i].Set {
						amounts(b.Budget)
					}
				}
			}
		}
		for _, r := range []wire.Validator{new(wire.ReleaseRequest), new(wire.BalanceRequest), new(wire.StatementRequest),
			new(wire.PrincipalRequest), new(wire.WhoisRequest), new(wire.CancelRequest), new(wire.PriceRequest), new(wire.VMsRequest)} {
			_ = wire.Decode(data, r) // must not panic
		}
	})
}

// fuzzService feeds arbitrary bytes to the strict decoder of each of
// service's messages: it must never panic, and a value it accepts must
// encode to a body it accepts again, and that body must encode the same:
// what one component decodes, it can pass on unchanged. Seeded with the
// valid values and refusals of messages.
func fuzzService(f *testing.F, service string) {
	var types []wire.Validator
	for _, m := range messages {
		if m.service != service {
			continue
		}
		types = append(types, m.valid[0])
		for _, v := range m.valid {
			f.Add([]byte(jsonOf(v)))
		}
		for _, body := range m.rejects {
			f.Add([]byte(body))
		}
	}
	if len(types) == 0 {
		f.Fatalf("no messages of service %s", service)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range types {
			v := fresh(typ)
			if wire.Decode(data, v) != nil {
				continue
			}
			again, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%s: accepted %q, cannot encode it: %v", typeName(typ), data, err)
			}
			w := fresh(typ)
			if err := wire.Decode(again, w); err != nil {
				t.Fatalf("%s: accepted %q, refused its encoding %s: %v", typeName(typ), data, again, err)
			}
			if third, _ := json.Marshal(w); !bytes.Equal(third, again) {
				t.Fatalf("%s: %q decodes and encodes to %s, then to %s", typeName(typ), data, again, third)
			}
		}
	})
}

func FuzzBank(f *testing.F)       { fuzzService(f, "bank") }
func FuzzHolds(f *testing.F)      { fuzzService(f, "holds") }
func FuzzPrincipals(f *testing.F) { fuzzService(f, "principals") }
func FuzzBroker(f *testing.F)     { fuzzService(f, "broker") }
func FuzzAgent(f *testing.F)      { fuzzService(f, "agent") }
func FuzzJobs(f *testing.F)       { fuzzService(f, "jobs") }
