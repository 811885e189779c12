package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// message is one type of the contract that has a Validate method: its
// service (the file it is declared in), values Decode must accept, and
// bodies it must refuse, by why.
type message struct {
	service string
	valid   []wire.Validator
	rejects map[string]string
}

// messages lists every type with a Validate method, one entry each:
// TestEveryValidatorIsListed fails when a new one is not here, so none goes
// without its round trip, its refusals and its fuzzing.
var messages = []message{
	// bank.go
	{"bank", vs(grant), map[string]string{
		"no amount":     with(grant, "amount_micro", 0),
		"negative":      with(grant, "amount_micro", -1),
		"above the max": with(grant, "amount_micro", int64(1)<<62),
		"dotted user":   with(grant, "user", "a.b"),
		"spaced id":     with(grant, "id", "g 1"),
		"no id":         with(grant, "id", absent),
		"long memo":     with(grant, "memo", strings.Repeat("m", wire.MaxMemo+1)),
	}},
	{"bank", vs(&wire.BalanceRequest{User: "alice"}), map[string]string{
		"no user":       `{"v":1}`,
		"wildcard user": `{"v":1,"user":"a*"}`,
	}},
	{"bank", vs(&wire.LedgerRequest{}), nil},
	{"bank", vs(transfer), map[string]string{
		"to oneself": with(transfer, "to", "alice"),
		"no amount":  with(transfer, "amount_micro", 0),
		"no payer":   with(transfer, "from", absent),
		"long memo":  with(transfer, "memo", strings.Repeat("m", wire.MaxMemo+1)),
	}},
	{"bank", vs(income, &wire.IncomeSetRequest{User: "alice"}), map[string]string{
		"too often":     with(income, "every", "30s"),
		"over a year":   with(income, "every", "9000h"),
		"negative":      with(income, "amount_micro", -1),
		"dotted user":   with(income, "user", "a.b"),
		"not a period":  with(income, "every", 60),
		"not a setting": with(income, "every", "soon"),
	}},
	{"bank", vs(&wire.StatementRequest{User: "alice", Limit: 10}, &wire.StatementRequest{Account: "provider:host-1"}), map[string]string{
		"user and account": `{"v":1,"user":"alice","account":"provider:host-1"}`,
		"neither":          `{"v":1}`,
		"negative limit":   `{"v":1,"user":"alice","limit":-1}`,
		"limit too high":   `{"v":1,"user":"alice","limit":10001}`,
	}},
	// holds.go
	{"holds", vs(hold, placedHold), map[string]string{
		"vm twice":      with(placedHold, "placement", []wire.Placed{{VM: "a1", Host: "host-1"}, {VM: "a1", Host: "host-1"}}),
		"dotted place":  with(placedHold, "placement", []wire.Placed{{VM: "a1", Host: "a.b"}}),
		"hosts differ":  with(placedHold, "hosts", []string{"host-1"}),
		"place no host": with(placedHold, "placement", []wire.Placed{{VM: "a1"}}),
		"no expiry":     with(hold, "expires", absent),
		"dotted host":   with(hold, "hosts", []string{"a.b"}),
		"no amount":     with(hold, "amount_micro", 0),
		"no id":         with(hold, "id", absent),
		"long memo":     with(hold, "memo", strings.Repeat("m", wire.MaxMemo+1)),
		"too many host": with(hold, "hosts", manyNames(wire.MaxHoldHosts+1)),
	}},
	{"holds", vs(capture), map[string]string{
		"no legs":          with(capture, "legs", []string{}),
		"negative tick":    with(capture, "tick", -1),
		"twice a leg":      with(capture, "legs", []wire.CaptureLeg{capture.Legs[0], capture.Legs[0]}),
		"twice a hold's":   with(capture, "legs", []wire.CaptureLeg{capture.Legs[0], {ID: "l-2", Hold: "h-1", VM: "vm1", Cumulative: 9}}),
		"nothing captured": with(capture, "legs", []wire.CaptureLeg{{ID: "l-1", Hold: "h-1", VM: "vm1"}}),
		"dotted owner":     with(capture, "legs", []wire.CaptureLeg{{ID: "l-1", Hold: "h-1", VM: "vm1", Cumulative: 7, Owner: "a.b"}}),
		"dotted host":      with(capture, "host", "a.b"),
	}},
	{"holds", vs(&wire.ReleaseRequest{Hold: "h-1", User: "alice"}, &wire.ReleaseRequest{Hold: "h-1", User: "alice", ID: "r-1", Amount: 5}), map[string]string{
		"part without id": `{"v":1,"hold":"h-1","user":"alice","amount_micro":5}`,
		"negative part":   `{"v":1,"hold":"h-1","user":"alice","id":"r-1","amount_micro":-5}`,
		"no hold":         `{"v":1,"user":"alice"}`,
	}},
	{"holds", vs(extend), map[string]string{
		"no amount": with(extend, "amount_micro", 0),
		"no hold":   with(extend, "hold", absent),
		"no id":     with(extend, "id", absent),
	}},
	{"holds", vs(&wire.OpenHoldsRequest{MemoPrefix: "plan ", Before: t0}), map[string]string{
		"long prefix": `{"v":1,"memo_prefix":"` + strings.Repeat("m", wire.MaxMemo+1) + `","before":"2026-01-02T03:04:05Z"}`,
	}},
	{"holds", vs(&wire.HoldsRequest{IDs: []string{"h-1", "h-2"}}), map[string]string{
		"no ids":    `{"v":1,"ids":[]}`,
		"spaced id": `{"v":1,"ids":["h 1"]}`,
		"too many":  with(&wire.HoldsRequest{}, "ids", manyNames(wire.MaxHoldsRead+1)),
	}},
	// principals.go
	{"principals", vs(principal, &wire.PrincipalRequest{Key: userKey, Name: "admin", Role: wire.RoleAdmin}), map[string]string{
		"unknown role":   with(principal, "role", "root"),
		"not a key":      with(principal, "key", "Uxyz"),
		"account key":    with(principal, "key", accountKey),
		"spaced name":    with(principal, "name", "a b"),
		"no name":        with(principal, "name", absent),
		"cert not a map": with(principal, "cert", "sealed"),
	}},
	{"principals", vs(&wire.WhoisRequest{Key: userKey}), map[string]string{
		"no key":      `{"v":1}`,
		"account key": `{"v":1,"key":"` + accountKey + `"}`,
	}},
	{"principals", vs(&wire.PrincipalsRequest{}, &wire.PrincipalsRequest{Role: wire.RoleAgent, Name: "host-1", Live: true}), map[string]string{
		"unknown role": `{"v":1,"role":"root"}`,
		"dotted name":  `{"v":1,"name":"a.b"}`,
	}},
	{"principals", vs(revoke), map[string]string{
		"not a key":    with(revoke, "key", "Uxyz"),
		"account key":  with(revoke, "key", accountKey),
		"unknown role": with(revoke, "role", "root"),
		"no name":      with(revoke, "name", absent),
	}},
	{"principals", vs(rotate), map[string]string{
		"the same key":  with(rotate, "key", otherUserKey),
		"old not a key": with(rotate, "old", "Uxyz"),
		"no old key":    with(rotate, "old", absent),
		"unknown role":  with(rotate, "role", "root"),
	}},
	{"principals", vs(revoked, &wire.RevokedNotice{Key: userKey, Name: "alice", Role: wire.RoleUser, Record: sealed}), map[string]string{
		"successor not a key": with(revoked, "successor", "Uxyz"),
		"no key":              with(revoked, "key", absent),
		"spaced name":         with(revoked, "name", "a b"),
	}},
	// broker.go
	{"broker", vs(spend, workflowSpend, pacedSpend), map[string]string{
		"pace over duration":    with(pacedSpend, "pace", "2h"),
		"pace below 1s":         with(pacedSpend, "pace", "10ms"),
		"share above all":       with(pacedSpend, "vm_share_ppm", wire.FullShare+1),
		"negative share":        with(pacedSpend, "vm_share_ppm", -1),
		"unknown strategy":      with(spend, "strategy", "greedy"),
		"vms and workflows":     with(workflowSpend, "vms", []string{"a1"}),
		"a vm twice":            with(spend, "vms", []string{"a1", "a1"}),
		"budget below the vms":  with(spend, "budget_micro", 1),
		"boost of 1":            with(spend, "boost", 1),
		"no duration":           with(spend, "duration", "0s"),
		"stages without a plan": with(spend, "strategy", wire.StrategyStage),
		"hosts all 0":           with(spend, "host_weights", map[string]float64{"host-1": 0}),
		"no vms":                with(spend, "vms", absent),
	}},
	{"broker", vs(&wire.AdjustRequest{Plan: "p-1", User: "alice", ID: "a-1", More: 5}, &wire.AdjustRequest{Plan: "p-1", User: "alice", ID: "a-2", Less: 5}), map[string]string{
		"more and less": `{"v":1,"plan":"p-1","user":"alice","id":"a-1","more_micro":5,"less_micro":5}`,
		"neither":       `{"v":1,"plan":"p-1","user":"alice","id":"a-1"}`,
		"no id":         `{"v":1,"plan":"p-1","user":"alice","more_micro":5}`,
	}},
	{"broker", vs(&wire.CancelRequest{Plan: "p-1", User: "alice", ID: "c-1"}), map[string]string{
		"no plan":   `{"v":1,"user":"alice"}`,
		"spaced id": `{"v":1,"plan":"p-1","user":"alice","id":"c 1"}`,
	}},
	{"broker", vs(&wire.PlansRequest{User: "alice"}, &wire.PlansRequest{}), map[string]string{
		"dotted user": `{"v":1,"user":"a.b"}`,
	}},
	{"broker", vs(&wire.StageRequest{User: "alice", Workflow: "etl", Stage: "stage-2"}), map[string]string{
		"no user":         `{"v":1,"workflow":"etl","stage":"stage-2"}`,
		"no workflow":     `{"v":1,"user":"alice","stage":"stage-2"}`,
		"no stage":        `{"v":1,"user":"alice","workflow":"etl"}`,
		"dotted workflow": `{"v":1,"user":"alice","workflow":"a.b","stage":"stage-2"}`,
		"wildcard stage":  `{"v":1,"user":"alice","workflow":"etl","stage":"*"}`,
		"colon in stage":  `{"v":1,"user":"alice","workflow":"etl","stage":"etl:stage-2"}`,
		"stage not text":  `{"v":1,"user":"alice","workflow":"etl","stage":2}`,
	}},
	{"broker", vs(&wire.PriceRequest{Host: "host-1"}, &wire.PriceRequest{}), map[string]string{
		"slashed host": `{"v":1,"host":"h/1"}`,
	}},
	{"broker", vs(&wire.VMsRequest{Owner: "alice", Host: "host-1"}), map[string]string{
		"dotted owner": `{"v":1,"owner":"a.b"}`,
		"dotted host":  `{"v":1,"host":"a.b"}`,
	}},
	{"broker", vs(
		&wire.PredictRequest{Host: "host-1", Query: wire.WhatIfPerformance, Spending: 10, Guarantee: 0.9},
		&wire.PredictRequest{Host: "host-1", Query: wire.WhatIfPrice, Performance: 0.5, Guarantee: 0.9},
		&wire.PredictRequest{Host: "host-1", Query: wire.WhatIfGuarantee, Spending: 10, Performance: 0.5}), map[string]string{
		"unknown query":     `{"v":1,"host":"host-1","query":"cost","spending_micro_per_s":10,"guarantee":0.9}`,
		"certain guarantee": `{"v":1,"host":"host-1","query":"performance","spending_micro_per_s":10,"guarantee":1}`,
		"spending nothing":  `{"v":1,"host":"host-1","query":"guarantee","performance":0.5}`,
		"no host":           `{"v":1,"query":"price","performance":0.5,"guarantee":0.9}`,
	}},
	// agent.go
	{"agent", vs(&bid, &moreBid), map[string]string{
		"many more":   with(&moreBid, "more", make([]wire.SignedRequest, wire.MaxMore+1)),
		"no budget":   with(&bid, "budget_micro", 0),
		"no duration": with(&bid, "duration", "0s"),
		"no vm":       with(&bid, "vm", absent),
		"spaced hold": with(&bid, "hold", "h 1"),
	}},
	{"agent", vs(bids), map[string]string{
		"nothing":               `{"v":1}`,
		"a vm twice":            with(bids, "set", []wire.Bid{bid, bid}),
		"cancel without a plan": with(bids, "plan", absent),
		"an invalid bid":        with(bids, "set", []wire.Bid{{VM: "a1"}}),
	}},
	{"agent", vs(batch), map[string]string{
		"no change":                with(batch, "changes", []wire.BidRequest{}),
		"a change of another v":    with(batch, "changes", []wire.BidRequest{{Versioned: wire.Versioned{V: 2}, Set: []wire.Bid{bid}}}),
		"a change's unknown field": `{"v":1,"changes":[{"v":1,"sets":[]}]}`,
	}},
	{"agent", vs(&wire.StateRequest{}), nil},
	{"agent", vs(hostState), map[string]string{
		"no host":   with(hostState, "host", absent),
		"dotted vm": with(hostState, "vms", []wire.VMState{{VM: "a.b"}}),
	}},
	// jobs.go
	{"jobs", vs(&job), map[string]string{
		"no maps":               with(&job, "maps", 0),
		"a vm twice":            with(&job, "vms", []string{"a1", "a1"}),
		"no map time":           with(&job, "profile", strategies.JobProfile{}),
		"max below average":     with(&job, "profile", strategies.JobProfile{MapAvg: 10, MapMax: 5}),
		"progress decreasing":   with(&job, "jockey_table", wire.JockeyTable{Progress: []float64{1, 0}, Alloc: []float64{1}, Remaining: [][]float64{{1}, {0}}}),
		"reduces without slots": with(&job, "reduce_slots", 0),
	}},
	{"jobs", vs(&wire.QuoteRequest{User: "alice", Job: job, Points: 5}), map[string]string{
		"too many points": `{"v":1,"user":"alice","points":1001,"job":` + jsonOf(job) + `}`,
		"no job":          `{"v":1,"user":"alice"}`,
	}},
	{"jobs", vs(submit, &wire.SubmitRequest{ID: "j-2", User: "alice", Job: job, BestEffort: true, Budget: 100},
		&wire.SubmitRequest{ID: "j-3", User: "alice", Job: job, Deadline: t0, MaxPrice: 70, Pace: wire.Duration(90 * time.Second)}), map[string]string{
		"pace below 1s":               with(submit, "pace", "1ms"),
		"neither deadline nor budget": with(submit, "deadline", absent),
		"best effort with a deadline": with(submit, "best_effort", true),
		"negative max price":          with(submit, "max_price_micro", -1),
		"spaced id":                   with(submit, "id", "j 1"),
	}},
	{"jobs", vs(&wire.JobsRequest{User: "alice"}, &wire.JobsRequest{}), map[string]string{
		"dotted user": `{"v":1,"user":"a.b"}`,
	}},
	{"jobs", vs(&wire.ProgressRequest{User: "alice", Job: "etl", Progress: 0.5, MapsDone: 3, ReducesDone: 1}), map[string]string{
		"progress past 1":   `{"v":1,"user":"alice","job":"etl","progress":1.5}`,
		"negative maps":     `{"v":1,"user":"alice","job":"etl","progress":0.5,"maps_done":-1}`,
		"no job":            `{"v":1,"user":"alice","progress":0.5}`,
		"too many reduces":  `{"v":1,"user":"alice","job":"etl","progress":0.5,"reduces_done":10000001}`,
		"progress not real": `{"v":1,"user":"alice","job":"etl","progress":"half"}`,
	}},
}

// The valid values the entries start from.
var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

	userKey    = publicKey(nkeys.CreateUser)
	accountKey = publicKey(nkeys.CreateAccount)
	// otherUserKey is a second user key: a rotation's old key.
	otherUserKey = publicKey(nkeys.CreateUser)

	signedSpend = &wire.SignedRequest{Subject: wire.BrokerSpend, Key: userKey, Time: "1767322245000000006", Nonce: "bm9uY2U",
		Sig: "c2ln", Body: []byte(`{"v":1,"user":"alice"}`)}
	sealed = &wire.Sealed{Purpose: "principal/" + userKey, Key: userKey, Time: 1, Body: []byte(`{"key":"k"}`), Sig: "c2ln"}

	grant     = &wire.GrantRequest{ID: "g-1", User: "alice", Amount: 5_000_000, Memo: "welcome"}
	transfer  = &wire.TransferRequest{ID: "t-1", From: "alice", To: "bob", Amount: 1, Memo: "lunch"}
	income    = &wire.IncomeSetRequest{User: wire.FairShareUser, Amount: 1000, Every: wire.Duration(24 * time.Hour)}
	hold      = &wire.HoldRequest{ID: "h-1", User: "alice", Amount: 500, Expires: t0, Hosts: []string{"host-1"}, Memo: "plan p-1", Mandate: signedSpend}
	capture   = &wire.CaptureBatch{Host: "host-1", Tick: 3, Legs: []wire.CaptureLeg{{ID: "l-1", Hold: "h-1", VM: "vm1", Cumulative: 7, Owner: "alice"}}}
	extend    = &wire.ExtendRequest{ID: "x-1", Hold: "h-1", User: "alice", Amount: 5, Mandate: signedSpend}
	principal = &wire.PrincipalRequest{Key: userKey, Name: "alice", Role: wire.RoleUser, Cert: sealed}
	revoke    = &wire.RevokeRequest{Key: userKey, Name: "alice", Role: wire.RoleUser, Cert: sealed}
	rotate    = &wire.RotateRequest{Name: "alice", Role: wire.RoleUser, Old: otherUserKey, OldCert: sealed, Key: userKey, Cert: sealed}
	revoked   = &wire.RevokedNotice{Key: otherUserKey, Name: "alice", Role: wire.RoleUser, Record: sealed, Successor: userKey, SuccessorRecord: sealed}
	spend     = &wire.SpendRequest{ID: "p-1", User: "alice", Budget: 1000, Duration: wire.Duration(time.Hour), VMs: []string{"a1", "a2"},
		Strategy: wire.StrategyBestResp, HostWeights: map[string]float64{"host-1": 1, "host-2": 0}}
	workflowSpend = &wire.SpendRequest{User: "alice", Budget: 1000, Duration: wire.Duration(90 * time.Minute), Strategy: wire.StrategyStageBottleneck,
		Boost: 0.5, Workflows: []wire.WorkflowSpec{{Name: "w", Weight: 1, Stages: []wire.StageSpec{
			{Name: "map", Weight: 1, VMs: []string{"a1"}}, {Name: "reduce", Weight: 2, VMs: []string{"a1", "a2"}}}}}}
	bid       = wire.Bid{VM: "a1", Owner: "alice", Plan: "p-1", Hold: "h-1", Budget: 100, Duration: wire.Duration(time.Hour), Mandate: signedSpend}
	bids      = &wire.BidRequest{Set: []wire.Bid{bid}, Cancel: []string{"a2"}, Plan: "p-1"}
	batch     = &wire.BidBatch{Changes: []wire.BidRequest{{Versioned: wire.Versioned{V: wire.Version}, Set: []wire.Bid{bid}}, {Versioned: wire.Versioned{V: wire.Version}, Cancel: []string{"a2"}, Plan: "p-2"}}}
	hostState = &wire.HostState{Host: "host-1", Time: t0, Tick: 4, Price: 12.5,
		VMs: []wire.VMState{{VM: "a1", Owner: "alice", Rate: 1.5, Share: 0.5, Util: 0.25, Idle: true,
			Bids: []wire.VMBid{{Plan: "p-1", Hold: "h-1", Rate: 1.5, Budget: 100, Charged: 3, Ends: t0}}, Caps: map[string]float64{wire.ResourceDisk: 10}}},
		Resources: []wire.ResourceMode{{Resource: wire.ResourceCPU, Mode: wire.ModeWeights}, {Resource: wire.ResourceDisk, Mode: wire.ModeThrottle, Capacity: 80, Why: "bfq"}}}
	job = wire.JobSpec{Name: "etl", VMs: []string{"a1", "a2"}, Maps: 10, Reduces: 2, MapSlots: 4, ReduceSlots: 2, MapSelectivity: 0.5,
		Profile: strategies.JobProfile{MapAvg: 10, MapMax: 20, Sh1Avg: 1, Sh1Max: 2, ShTypAvg: 3, ShTypMax: 4, ReduceAvg: 5, ReduceMax: 6},
		Table:   &wire.JockeyTable{Progress: []float64{0, 1}, Alloc: []float64{0.5, 1}, Remaining: [][]float64{{10, 5}, {0, 0}}}}
	submit = &wire.SubmitRequest{ID: "j-1", User: "alice", Job: job, Deadline: t0, MaxPrice: 70}
)

// Values of the fields that bind a mandate: its pace and VM share, the
// hold's placement, the additions a bid carries.
var (
	placedHold = &wire.HoldRequest{ID: "h-2", User: "alice", Amount: 500, Expires: t0, Hosts: []string{"host-1", "host-2"}, Memo: "plan p-2",
		Mandate: signedSpend, Placement: []wire.Placed{{VM: "a1", Host: "host-1"}, {VM: "a2", Host: "host-2"}, {VM: "a3", Host: "host-1"}}}
	moreBid = wire.Bid{VM: "a1", Owner: "alice", Plan: "p-1", Hold: "h-1", Budget: 100, Duration: wire.Duration(time.Hour), Mandate: signedSpend,
		More: []wire.SignedRequest{*signedSpend}}
	pacedSpend = &wire.SpendRequest{ID: "p-2", User: "alice", Budget: 1000, Duration: wire.Duration(time.Hour), VMs: []string{"a1", "a2"},
		Strategy: wire.StrategyFair, Pace: wire.Duration(40 * time.Minute), VMShare: 500_000}
)

func publicKey(create func() (nkeys.KeyPair, error)) string {
	kp, err := create()
	if err != nil {
		panic(err)
	}
	k, err := kp.PublicKey()
	if err != nil {
		panic(err)
	}
	return k
}

func vs(v ...wire.Validator) []wire.Validator { return v }

// absent removes a field in with.
var absent = &struct{}{}

// with is v as it travels (stamped with this version when it is a
// message) with one field set to value, or removed when value is absent.
func with(v wire.Validator, field string, value any) string {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader([]byte(jsonOf(v))))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		panic(err)
	}
	if value == absent {
		delete(m, field)
	} else {
		m[field] = value
	}
	return jsonOf(m)
}

// jsonOf is v's JSON, stamped with this version when it is a message.
func jsonOf(v any) string {
	if msg, ok := v.(wire.Message); ok {
		wire.Stamp(msg)
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func manyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "h-" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
	}
	return out
}

// typeName is the name of v's type.
func typeName(v any) string { return reflect.TypeOf(v).Elem().Name() }

// fresh is a new zero value of v's type.
func fresh(v wire.Validator) wire.Validator {
	return reflect.New(reflect.TypeOf(v).Elem()).Interface().(wire.Validator)
}

// TestEveryValidatorIsListed reads the package's source: every type with
// a Validate method has an entry in messages, of the service whose file
// declares it, so a new message cannot miss its round trip, refusals and
// fuzzing — nor land in another service's file.
func TestEveryValidatorIsListed(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]string{}  // type → file
	validated := map[string]string{} // type with Validate → file of the method
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						declared[ts.Name.Name] = name
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || d.Name.Name != "Validate" {
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				validated[recv.(*ast.Ident).Name] = name
			}
		}
	}
	if len(validated) == 0 {
		t.Fatal("found no Validate method: is the test run in the package's directory?")
	}
	listed := map[string]string{}
	for _, m := range messages {
		for _, v := range m.valid {
			listed[typeName(v)] = m.service
		}
	}
	var missing []string
	for typ, file := range validated {
		service, ok := listed[typ]
		switch {
		case !ok:
			missing = append(missing, typ+" ("+file+")")
		case declared[typ] != service+".go" || file != service+".go":
			t.Errorf("%s is listed for %s but declared in %s (its Validate in %s)", typ, service, declared[typ], file)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("types with a Validate method missing from messages (add a valid value, refusals and its service): %s", strings.Join(missing, ", "))
	}
	for typ := range listed {
		if _, ok := validated[typ]; !ok {
			t.Errorf("%s is listed but has no Validate method", typ)
		}
	}
}

// TestRoundTrip: every valid value travels as JSON and decodes strictly to
// the value it was.
func TestRoundTrip(t *testing.T) {
	for _, m := range messages {
		for i, v := range m.valid {
			body := jsonOf(v)
			got := fresh(v)
			if err := wire.Decode([]byte(body), got); err != nil {
				t.Errorf("%s #%d: %s refused: %v", typeName(v), i, body, err)
				continue
			}
			if !reflect.DeepEqual(got, v) {
				t.Errorf("%s #%d: decoded %+v, sent %+v", typeName(v), i, got, v)
			}
		}
	}
}

// TestRejects: what a message refuses, its own refusals and every
// message's: another version, an unknown field, trailing data, no object.
func TestRejects(t *testing.T) {
	for _, m := range messages {
		v := m.valid[0]
		name := typeName(v)
		rejects := map[string]string{
			"unknown field": strings.Replace(jsonOf(v), "{", `{"zzz":1,`, 1),
			"trailing data": jsonOf(v) + "{}",
			"an array":      "[" + jsonOf(v) + "]",
			"null":          "null",
			"empty":         "",
		}
		if _, versioned := v.(wire.Message); versioned {
			rejects["version 2"] = with(v, "v", 2)
			rejects["no version"] = with(v, "v", absent)
		}
		for why, body := range m.rejects {
			rejects[why] = body
		}
		for why, body := range rejects {
			if err := wire.Decode([]byte(body), fresh(v)); !errors.Is(err, wire.ErrBadRequest) {
				t.Errorf("%s, %s: %s → %v, want bad_request", name, why, body, err)
			}
		}
	}
}
