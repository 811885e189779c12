package mandate_test

import (
	"math"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestPaceAndShareAreRead: a spend's signed pace and VM share are read,
// its Duration and all of the rate when it signs none; a submit's pace is
// at least wire.MinPace, its share all; a hold lives at most to the end of
// the period, grace and the signer's skew included, on the bank's clock.
func TestPaceAndShareAreRead(t *testing.T) {
	alice, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	read := func(subject string, req wire.Message) mandate.Mandate {
		t.Helper()
		s, err := mandate.Sign(alice, subject, req)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mandate.Read(*s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	spend := &wire.SpendRequest{ID: "p1", User: "alice", Budget: 600, Duration: wire.Duration(time.Hour), VMs: []string{"a1", "a2"}, Strategy: wire.StrategyFair}
	if m := read(wire.BrokerSpend, spend); m.Pace != time.Hour || m.VMShare != wire.FullShare {
		t.Errorf("unsigned pace and share: %v %d", m.Pace, m.VMShare)
	}
	spend.Pace, spend.VMShare = wire.Duration(20*time.Minute), 500_000
	m := read(wire.BrokerSpend, spend)
	if m.Pace != 20*time.Minute || m.VMShare != 500_000 {
		t.Errorf("signed pace and share: %v %d", m.Pace, m.VMShare)
	}
	// On a bank clock 3 days behind the signer's.
	bankNow := m.Signer.Time.Add(-72 * time.Hour)
	if got, want := m.HoldUntil(bankNow, m.Signer.Time), bankNow.Add(time.Hour+mandate.Grace+signing.MaxSkew); !got.Equal(want) {
		t.Errorf("hold until %s, want %s", got, want)
	}
	job := wire.JobSpec{Name: "etl", VMs: []string{"a1"}}
	unpaced := read(wire.BrokerSubmit, &wire.SubmitRequest{ID: "j", User: "alice", BestEffort: true, Budget: 50, Job: job})
	if m := unpaced; m.Pace != wire.MinPace || m.VMShare != wire.FullShare {
		t.Errorf("unsigned submit: %v %d", m.Pace, m.VMShare)
	}
	dl := time.Now().Add(time.Hour)
	sm := read(wire.BrokerSubmit, &wire.SubmitRequest{ID: "j2", User: "alice", Deadline: dl, MaxPrice: 50, Job: job, Pace: wire.Duration(5 * time.Minute)})
	if sm.Pace != 5*time.Minute || !sm.HoldUntil(bankNow, time.Now()).Equal(sm.Until.Add(signing.MaxSkew)) {
		t.Errorf("signed submit: %v, hold until %s", sm.Pace, sm.HoldUntil(bankNow, time.Now()))
	}
	if a := read(wire.BrokerAdjust, &wire.AdjustRequest{Plan: "p1", User: "alice", ID: "m", More: 5}); a.Pace != 0 || a.VMShare != 0 {
		t.Errorf("adjustment: %v %d", a.Pace, a.VMShare)
	}
}

// TestAllowed: a hold's schedule allows each term's amount evenly over its
// pace, Slack ahead, never more than the amount, rounded down; an
// extension's pace is what is left of the first term's.
func TestAllowed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first := mandate.Term{Amount: 3_000_000, Start: t0, Pace: 10 * time.Minute}
	for _, c := range []struct {
		at   time.Duration
		want money.Micro
	}{
		{-time.Hour, 0},
		{-mandate.Slack, 0},
		{0, 150_000},                  // 30 s of 600 s
		{5 * time.Second, 175_000},    // a bid of 3 in 5 s takes no more
		{5 * time.Minute, 1_650_000},  // 330 s
		{10 * time.Minute, 3_000_000}, // all of it
		{24 * time.Hour, 3_000_000},
	} {
		if got := mandate.Allowed([]mandate.Term{first}, t0.Add(c.at)); got != c.want {
			t.Errorf("at %s: %s, want %s", c.at, got, c.want)
		}
	}
	// 1 more at 4 min: over the 6 min left of the first term's pace.
	ext := mandate.Term{Amount: 1_000_000, Start: t0.Add(4 * time.Minute), Pace: mandate.ExtensionPace(first, t0.Add(4*time.Minute))}
	if ext.Pace != 6*time.Minute {
		t.Fatalf("extension pace %s", ext.Pace)
	}
	if got := mandate.Allowed([]mandate.Term{first, ext}, t0.Add(5*time.Minute)); got != 1_650_000+250_000 { // 90 s of 360 s
		t.Errorf("with the extension: %s", got)
	}
	if p := mandate.ExtensionPace(first, t0.Add(time.Hour)); p != wire.MinPace {
		t.Errorf("an extension past the pace: %s", p)
	}
	// Amounts near money.Max do not overflow.
	huge := mandate.Term{Amount: money.Max, Start: t0, Pace: wire.MaxDuration}
	if got := mandate.Allowed([]mandate.Term{huge}, t0.Add(wire.MaxDuration/2)); got <= money.Max/2-1 || got > money.Max/2+money.Max/1000 {
		t.Errorf("a large term half way: %s of %s", got, money.Max)
	}
	for _, c := range []struct {
		m     money.Micro
		share int64
		want  money.Micro
	}{
		{1000, wire.FullShare, 1000}, {1000, 500_000, 500}, {999, 333_333, 332}, {money.Max, 1, money.Max / wire.FullShare}, {5, 0, 0},
	} {
		if got := mandate.ShareOf(c.m, c.share); got != c.want {
			t.Errorf("%d millionths of %s: %s, want %s", c.share, c.m, got, c.want)
		}
	}
}

// TestRateCap: an agent takes a bid no faster than the VM's share of the
// signed rate, each term's pace less Slack; a signed spend --more raises
// it by its amount over what is left of the pace when it was signed.
func TestRateCap(t *testing.T) {
	t0 := time.Now()
	spend := mandate.Mandate{Budget: 20_000_000, Pace: 10 * time.Minute, VMShare: 500_000, Signer: signing.Caller{Time: t0}}
	rc := mandate.RateCap(spend, nil)
	if want := 0.5 * 20e6 / 570; math.Abs(rc-want) > 1e-6 {
		t.Fatalf("rate cap %v µ/s, want %v", rc, want)
	}
	honest := money.Micro(10_000_000) // half of it over the 10 min
	if !mandate.Allows(rc, honest, 10*time.Minute) || mandate.Allows(rc, 3_000_000, 5*time.Second) {
		t.Errorf("the honest bid or the 3-in-5-s bid judged wrong at %v µ/s", rc)
	}
	if got := mandate.Clamp(rc, 3_000_000, 5*time.Second); !mandate.Allows(rc, got, 5*time.Second) || got < 87_000 {
		t.Errorf("clamped to %s", got)
	}
	more := mandate.Mandate{Budget: 4_000_000, Signer: signing.Caller{Time: t0.Add(5 * time.Minute)}}
	with := mandate.RateCap(spend, []mandate.Mandate{more})
	if want := rc + 0.5*4e6/270; math.Abs(with-want) > 1e-6 {
		t.Errorf("with 4 more half way: %v µ/s, want %v", with, want)
	}
}
