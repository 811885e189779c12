package natsauth_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/internal/natsauth"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// The key every principal of the table below has (its inbox is in the
// table).
const tableKey = "UKEY"

// jsRead is the read side of the JetStream API on stream s: what the
// table grants the roles that read a bucket.
func jsRead(s string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + s, "$JS.API.STREAM.MSG.GET." + s, "$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".>",
		"$JS.API.CONSUMER.CREATE." + s, "$JS.API.CONSUMER.CREATE." + s + ".>", "$JS.API.CONSUMER.INFO." + s + ".>",
		"$JS.API.CONSUMER.DELETE." + s + ".>", "$JS.FC." + s + ".>",
	}
}

// TestJetStreamAPIPerRole: every subject each role may publish beyond its
// requests — the JetStream API ($JS), its buckets' keys ($KV), its events,
// its host state, inboxes — and every subscription, against a table
// written here: a permission widened anywhere fails this test. No service
// may create, update, delete or purge a stream (the admin's), so none may
// re-point one at the inboxes or wipe it.
func TestJetStreamAPIPerRole(t *testing.T) {
	inbox := wire.InboxPrefix(tableKey) + ".>"
	for _, c := range []struct {
		role, name string
		publish    []string // beyond the requests of the role
		subscribe  []string // beyond serving its table
		serves     []service.Entry
	}{
		{role: wire.RoleUser, name: "alice", subscribe: []string{inbox}},
		{role: wire.RoleAgent, name: "host-1",
			publish: []string{
				"mrm.v1.host.host-1.state", "$KV.MRM_HOSTS.host-1", "$JS.API.STREAM.INFO.KV_MRM_HOSTS", "mrm.v1.events.agent.>",
			},
			subscribe: []string{inbox, "$SRV.>", "mrm.v1.registry.revoked"}, serves: tables().Agent},
		{role: wire.RoleBroker, name: "broker",
			publish: slices.Concat([]string{"mrm.v1.events.broker.>", "$KV.MRM_PLANS.>", "$KV.MRM_NONCES.>"},
				jsRead("KV_MRM_PLANS"), jsRead("KV_MRM_NONCES"), jsRead("KV_MRM_HOSTS")),
			subscribe: []string{"mrm.v1.host.*.state", inbox, "$SRV.>", "mrm.v1.registry.revoked"}, serves: tables().Broker},
		{role: wire.RoleBank, name: "bank",
			publish: []string{"mrm.v1.events.bank.>", "_INBOX.>", "$JS.API.STREAM.INFO.MRM_EVENTS", "$JS.API.STREAM.MSG.GET.MRM_EVENTS",
				"mrm.v1.registry.revoked"},
			subscribe: []string{inbox, "$SRV.>", "mrm.v1.registry.revoked"}, serves: tables().Bank},
	} {
		perms := natsauth.Permissions(tables(), wire.Principal{Key: tableKey, Name: c.name, Role: c.role})
		var beyond []string
		for _, s := range perms.Publish.Allow {
			if !isRequest(s) {
				beyond = append(beyond, s)
			}
		}
		if want := sorted(c.publish); !slices.Equal(sorted(beyond), want) {
			t.Errorf("%s publishes beyond its requests:\n got  %q\n want %q", c.role, sorted(beyond), want)
		}
		want := slices.Clone(c.subscribe)
		for _, e := range c.serves {
			subj := e.Subject
			if c.role == wire.RoleAgent { // its own subjects only
				subj = strings.ReplaceAll(subj, "*", c.name)
			}
			if e.Queue != "" {
				subj += " " + e.Queue
			}
			want = append(want, subj)
		}
		if got := sorted(perms.Subscribe.Allow); !slices.Equal(got, sorted(want)) {
			t.Errorf("%s subscribes:\n got  %q\n want %q", c.role, got, sorted(want))
		}
		for _, s := range perms.Publish.Allow {
			for _, admin := range []string{"$JS.API.STREAM.CREATE", "$JS.API.STREAM.UPDATE", "$JS.API.STREAM.DELETE", "$JS.API.STREAM.PURGE",
				"$JS.API.STREAM.MSG.DELETE", "$JS.API.ACCOUNT", "$JS.API.INFO", ">"} {
				if strings.HasPrefix(s, admin) {
					t.Errorf("%s may publish %s: the admin's", c.role, s)
				}
			}
		}
	}
	admin := natsauth.Permissions(tables(), wire.Principal{Key: tableKey, Name: "admin", Role: wire.RoleAdmin})
	if !slices.Equal(admin.Publish.Allow, []string{">"}) || !slices.Equal(admin.Subscribe.Allow, []string{">"}) {
		t.Errorf("admin: %+v", admin)
	}
}

// isRequest: s is a service's request subject (the tables' own, checked
// by the tests of each role), not a stream, key, event, state, notice or
// inbox.
func isRequest(s string) bool {
	return strings.HasPrefix(s, "mrm.v1.") && !strings.HasPrefix(s, "mrm.v1.events.") && !strings.HasPrefix(s, "mrm.v1.host.") &&
		!strings.HasPrefix(s, "mrm.v1.registry.")
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
