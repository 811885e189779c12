package broker

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestStatesCoalescedPerHost: a worker behind keeps each host's latest
// state only, hosts in the order they came; none is dropped for another
// host's.
func TestStatesCoalescedPerHost(t *testing.T) {
	q := newLatestStates()
	put := func(host, data string) bool {
		return q.put(&nats.Msg{Subject: "mrm.v1.host." + host + ".state", Data: []byte(data)})
	}
	if put("h1", "1") || put("h2", "1") || !put("h1", "2") || !put("h1", "3") {
		t.Fatal("superseded wrongly reported")
	}
	var got []string
	for m := q.next(); m != nil; m = q.next() {
		got = append(got, m.Subject+"="+string(m.Data))
	}
	if len(got) != 2 || got[0] != "mrm.v1.host.h1.state=3" || got[1] != "mrm.v1.host.h2.state=1" {
		t.Fatalf("waiting states: %v", got)
	}
	if put("h1", "4") {
		t.Fatal("a state after its host's was taken reported superseded")
	}
}
