package bank

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestStalePublisherAppendsNothingBehind: a publisher that read the outbox,
// then stalled past its lease and past the stream's duplicate window while
// another replica published those events and newer ones, publishes nothing
// when it wakes: the fence refuses it, and the stream holds every event
// once, in order.
func TestStalePublisherAppendsNothingBehind(t *testing.T) {
	ctx := context.Background()
	b, err := Open("sqlite:"+filepath.Join(t.TempDir(), "bank.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, nc := natstest.Start(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const window = 100 * time.Millisecond
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: wire.StreamEvents, Subjects: []string{wire.AllEvents}, Duplicates: window}); err != nil {
		t.Fatal(err)
	}
	event := func(n int) {
		t.Helper()
		ev := wire.Event{ID: fmt.Sprint("ev-", n), Component: "bank", Op: "grant", At: time.Now().UTC()}
		if err := b.st.run(ctx, func(t tx) error { return writeEvent(ctx, t, ev) }); err != nil {
			t.Fatal(err)
		}
	}
	event(1)
	event(2)
	stale, err := newPublisher(nc, b)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := newPublisher(nc, b)
	if err != nil {
		t.Fatal(err)
	}
	if mine, err := stale.lease(ctx); err != nil || !mine {
		t.Fatalf("the first publisher's lease: %v %v", mine, err)
	}
	if stale.last, err = stale.lastBankEvent(ctx); err != nil {
		t.Fatal(err)
	}
	stale.synced = true
	rows, err := stale.pending(ctx)
	if err != nil || len(rows) != 2 {
		t.Fatalf("pending: %v %v", rows, err)
	}
	// It stalls; its lease lapses, the other takes over and publishes.
	if _, err := b.st.db.ExecContext(ctx, `UPDATE outbox_lease SET until = 0`); err != nil {
		t.Fatal(err)
	}
	event(3)
	for {
		more, err := fresh.round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
	}
	if n, err := b.OutboxLen(ctx); err != nil || n != 0 {
		t.Fatalf("outbox after the takeover: %d %v", n, err)
	}
	time.Sleep(2 * window)
	if _, err := stale.publish(ctx, rows[0]); !natsutil.WrongLastSequence(err) {
		t.Fatalf("a stale publish: %v, want refused by the fence", err)
	}
	if more, err := stale.round(ctx); more || err != nil {
		t.Fatalf("the stale publisher's next round: %v %v", more, err)
	}
	st, err := js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			break
		}
		var ev wire.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.ID)
	}
	if fmt.Sprint(ids) != "[ev-1 ev-2 ev-3]" {
		t.Fatalf("the stream holds %v", ids)
	}
}
