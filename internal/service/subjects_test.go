package service_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/service"
)

var update = flag.Bool("update", false, "rewrite docs/SUBJECTS.md from the service tables")

const subjectsIntro = `
Every NATS request/reply subject of mrmarket, generated from the service
tables (` + "`bank.Endpoints`, `broker.Endpoints`, `agent.Endpoints`" + `) by
` + "`go test ./internal/service -run TestSubjectsDoc -update`" + `; the test
fails when this file and the tables disagree.

A signed subject takes only requests signed (package wire) by a registered
principal of one of its roles, each signature once; "(own)" admits the role
only for the principal the request acts for (a user's own money, an agent's
own host or provider account). A "replayable read" is signed but stores no
nonce: a replay changes nothing and learns only what its signer may read.
An unsigned subject is open to any client of the NATS account. An audited
subject's every success is published to the ` + "`MRM_EVENTS`" + ` stream on
` + "`mrm.v1.events.<component>.<op>`" + ` with the signed request that caused it
(` + "`mrmarket events`" + `). Requests are queued per signer and served in turn, so
one principal's flood does not starve the others.
Each component is also a nats.go/micro service: ` + "`$SRV.INFO.mrm-bank`" + `
and the like list its endpoints, ` + "`$SRV.STATS.…`" + ` their request and error
counts. The broker also subscribes to ` + "`mrm.v1.host.*.state`" + ` (agents'
publications, not requests; every VM's owner and bids are in them, so
only brokers and the admin may). The bank announces each key it revoked on
` + "`mrm.v1.registry.revoked`" + ` (` + "`wire.RevokedNotice`" + `, believed only with the admin's
records), which the bank replicas, the brokers and the agents follow to
forget the key at once.`

// TestSubjectsDoc: docs/SUBJECTS.md is what the service tables say.
func TestSubjectsDoc(t *testing.T) {
	var got bytes.Buffer
	err := service.WriteMarkdown(&got, "NATS subjects", subjectsIntro,
		service.Component{Name: "bank", Note: "Queue group `mrm-bank`: replicas share the load.", Table: bank.Endpoints(nil)},
		service.Component{Name: "broker", Note: "Queue group `mrm-broker`. Signed subjects are checked when the broker has Identities " +
			"(`mrmarket up` and `mrmarket broker` do). `vms` answers a user with its own VMs and, per host, only the number, " +
			"combined rate and combined share of the others' (`wire.OtherVMs`); the admin and brokers with every VM.", Table: broker.Endpoints(nil)},
		service.Component{Name: "agent", Note: "One agent per host: `*` is the host's id. Bids are checked when the agent has Identities " +
			"(`mrmarket up` and `mrmarket agent` do).", Table: agent.Endpoints(nil)},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []service.Table{bank.Endpoints(nil), broker.Endpoints(nil), agent.Endpoints(nil)} {
		if err := c.Check(); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join("..", "..", "docs", "SUBJECTS.md")
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("%s is out of date with the service tables: run go test ./internal/service -run TestSubjectsDoc -update\n--- generated\n%s", path, got.Bytes())
	}
}
