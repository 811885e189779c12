// Package natsauth is mrmarket's NATS-native authentication and
// authorization: which principal may connect, and what each may publish
// and subscribe to, enforced by the NATS server itself.
//
// # Authentication
//
// Every connection authenticates with its principal's own NKey (the keys
// in creds/ are NKey seeds): the server knows one NKey user per registered
// principal and nothing else, so nobody connects anonymously. The users
// are static NKey users generated from the bank's principal registry
// (Users, of its live keys) and reloaded when a principal is added or
// revoked — a reload closes the connections of a key no longer there, and
// the server refuses its reconnects: the embedded server of
// `mrmarket up` reloads at once (natsutil.Reload), a standalone
// nats-server is given a regenerated configuration (Config, `mrmarket nats
// config`) and `nats-server --signal reload`. Static users were chosen
// over auth callout: the server enforces the permissions with no service
// of ours in the connect path, and a reload is verified by the package's
// tests to take effect for new connections without a restart.
//
// # Authorization
//
// Permissions are generated from the service tables (the []service.Entry
// listings of bank.Endpoints, broker.Endpoints and agent.Endpoints, passed
// in as Tables so this package depends on none of them) and the principal's
// role and name, so the tables stay the one source of who may call what:
//   - every principal publishes requests only on the subjects its role may
//     call (the table entries listing its role, and open ones), and
//     subscribes only to its own inbox prefix wire.InboxPrefix(key);
//   - the bank alone subscribes to the bank's subjects, in queue group
//     mrm-bank, and publishes its audit events into MRM_EVENTS, which it
//     may look up and read its own last event from (its audit publisher's
//     fence) but not configure;
//   - brokers alone subscribe to the broker's subjects, in queue group
//     mrm-broker, read the host states (live and in MRM_HOSTS: they carry
//     every VM's owner, plans, holds, budgets and charges, which a user
//     sees of its own VMs only, through the broker's vms), and get, put and
//     watch the keys of the MRM_PLANS and MRM_NONCES buckets;
//   - the agent of host H subscribes only to its own agent subjects
//     (mrm.v1.agent.H.…), publishes only its own host state
//     (mrm.v1.host.H.state) and its own MRM_HOSTS key;
//   - the bank alone announces revoked keys (wire.RegistryRevoked), which
//     the services that cache identities (bank, brokers, agents) hear —
//     a notice counts only with the admin's records, so the permission
//     guards against noise, not forgery;
//   - services answer through allow_responses (a reply to a request they
//     received), never through blanket publish rights on _INBOX.> — but
//     the bank, whose answer to a principal's registration follows the
//     reload that admits it (a reload forgets pending responses);
//   - users have no JetStream access at all, so neither the host states
//     of MRM_HOSTS nor the audit stream MRM_EVENTS (every principal's
//     signed money requests): a user's own are its plans and statement;
//     admin may do everything (administration: creating and configuring
//     streams, purges, the audit stream).
//
// # Least privilege for JetStream
//
// No service creates, updates, deletes or purges a stream: the admin
// makes them (natsutil.EnsureAssets: at `mrmarket up`, which holds the
// admin's key, and `mrmarket nats assets` for a standalone deployment) and
// the services only open what exists, waiting a bounded time for it. A
// stream's configuration is its authority: whoever may update KV_MRM_PLANS
// may add _INBOX.> to its subjects and record every principal's replies, or
// shrink its limits and wipe the plans and nonces. So the services get
// the read side of the JetStream API (stream info, message and direct
// gets, consumers to watch and list keys) and the $KV subjects of their
// keys, never $JS.API.STREAM.CREATE/UPDATE/DELETE/PURGE. The key-level
// writes a bucket allows (a broker deleting or purging a plan key) are
// sealed-record business: the broker detects and restores those.
// TestJetStreamAPIPerRole lists every $JS subject each role may publish and
// every subscription, so any widening fails a test.
//
// # Connections per principal
//
// nats-server has no per-user connection limit (only per account and per
// server; the per-user one, nats-server issue 1552, was never built), and
// every principal is a user of one account: separate accounts would need
// service imports, which rewrite reply subjects and break the signed
// replies and per-principal inboxes. So ConnLimits states a limit per role
// (MaxConnections) and the servers mrmarket runs (`up`'s and each
// `mrmarket nats serve` node) hold each key to it themselves, closing its
// newest connections beyond (natsutil's connlimit.go); a stock nats-server
// given Config's file bounds only the server's total (max_connections).
//
// # TLS
//
// The server requires TLS with a certificate from the market's own CA
// (EnsureTLS writes ca.pem, server.pem and server-key.pem); clients verify
// the server with the CA (--tls-ca, MRM_TLS_CA). Client certificates are
// not used: a client proves who it is with its NKey, which already binds
// the connection to a principal; a client certificate would be a second
// secret per principal to issue and rotate for no added authority. An
// operator who wants them anyway adds verify: true to the tls block Config
// writes and issues certificates from the same CA.
package natsauth

import (
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Tables are the service tables' listings (bank.Endpoints(nil).List() and
// so on): the one source of who may request what.
type Tables struct {
	Bank, Broker, Agent []service.Entry
}

// ResponseTTL is how long a service may answer a request it received.
const ResponseTTL = 2 * time.Minute

// Users are the NKey users of principals, each with its role's permissions.
// A principal of an unknown role gets no user (it cannot connect).
func Users(t Tables, ps []wire.Principal) []*server.NkeyUser {
	users := make([]*server.NkeyUser, 0, len(ps))
	seen := map[string]bool{}
	for _, p := range ps {
		perms := Permissions(t, p)
		if perms == nil || seen[p.Key] {
			continue
		}
		seen[p.Key] = true
		users = append(users, &server.NkeyUser{Nkey: p.Key, Permissions: perms})
	}
	sort.Slice(users, func(i, j int) bool { return users[i].Nkey < users[j].Nkey })
	return users
}

// Permissions are what principal p may publish and subscribe to; nil for
// an unknown role.
func Permissions(t Tables, p wire.Principal) *server.Permissions {
	inbox := wire.InboxPrefix(p.Key) + ".>"
	var pub, sub []string
	switch p.Role {
	case wire.RoleAdmin:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{">"}},
			Subscribe: &server.SubjectPermission{Allow: []string{">"}},
		}
	case wire.RoleUser:
		pub = requests(t, p.Role)
		sub = []string{inbox}
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: pub},
			Subscribe: &server.SubjectPermission{Allow: sub},
		}
	case wire.RoleAgent:
		pub = append(requests(t, p.Role),
			wire.HostStateSubject(p.Name),
			"$KV."+wire.BucketHosts+"."+p.Name,
			"$JS.API.STREAM.INFO.KV_"+wire.BucketHosts,
			events(p.Role))
		sub = append(serves(t.Agent, p.Name), inbox, "$SRV.>", wire.RegistryRevoked)
	case wire.RoleBroker:
		pub = append(requests(t, p.Role), events(p.Role),
			"$KV."+wire.BucketPlans+".>", "$KV."+wire.BucketNonces+".>")
		pub = append(pub, jsRead("KV_"+wire.BucketPlans)...)
		pub = append(pub, jsRead("KV_"+wire.BucketNonces)...)
		pub = append(pub, jsRead("KV_"+wire.BucketHosts)...)
		sub = append(serves(t.Broker, ""), wire.AllHostStates, inbox, "$SRV.>", wire.RegistryRevoked)
	case wire.RoleBank:
		// The bank also publishes on every inbox: its answer to `principal
		// add` goes out after the server reloaded its users, and a reload
		// forgets the replies allow_responses was expecting. The bank is the
		// root of the money, and its replies are signed (clients that know
		// the admin key believe only those).
		pub = append(requests(t, p.Role), events(p.Role), "_INBOX.>", wire.RegistryRevoked)
		// Its audit publisher reads the last bank event it fences behind.
		pub = append(pub, "$JS.API.STREAM.INFO."+wire.StreamEvents, "$JS.API.STREAM.MSG.GET."+wire.StreamEvents)
		sub = append(serves(t.Bank, ""), inbox, "$SRV.>", wire.RegistryRevoked)
	default:
		return nil
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: dedup(pub)},
		Subscribe: &server.SubjectPermission{Allow: dedup(sub)},
		Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: ResponseTTL},
	}
}

// requests are the subjects role may send requests on: every entry of
// every table listing the role, and every open entry.
func requests(t Tables, role string) []string {
	var out []string
	for _, tab := range [][]service.Entry{t.Bank, t.Broker, t.Agent} {
		for _, e := range tab {
			if allows(e, role) {
				out = append(out, e.Subject)
			}
		}
	}
	return out
}

// allows: an open entry allows anyone; a signed one the roles it lists
// ("user (own)" counts as user).
func allows(e service.Entry, role string) bool {
	if len(e.Roles) == 0 {
		return true
	}
	for _, r := range e.Roles {
		if name, _, _ := strings.Cut(r, " "); name == role {
			return true
		}
	}
	return false
}

// serves are the subscriptions that serve a table: "subject queue" for an
// entry with a queue group (only in that group), its subject otherwise;
// a "*" in an agent's subject becomes host (its own subjects only).
func serves(tab []service.Entry, host string) []string {
	var out []string
	for _, e := range tab {
		subj := e.Subject
		if host != "" {
			subj = strings.ReplaceAll(subj, "*", host)
		}
		if e.Queue != "" {
			subj += " " + e.Queue
		}
		out = append(out, subj)
	}
	return out
}

// events is where a role's service publishes its audit events.
func events(role string) string { return "mrm.v1.events." + role + ".>" }

// jsRead is the JetStream API to open, get from and watch stream s (a
// watch and a key listing are ordered consumers): nothing that changes
// the stream.
func jsRead(s string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + s,
		"$JS.API.STREAM.MSG.GET." + s,
		"$JS.API.DIRECT.GET." + s,
		"$JS.API.DIRECT.GET." + s + ".>",
		"$JS.API.CONSUMER.CREATE." + s,
		"$JS.API.CONSUMER.CREATE." + s + ".>",
		"$JS.API.CONSUMER.INFO." + s + ".>",
		"$JS.API.CONSUMER.DELETE." + s + ".>",
		"$JS.FC." + s + ".>",
	}
}

func dedup(in []string) []string {
	seen := map[string]bool{}
	out := in[:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// MaxConnections is how many connections one principal of each role may
// hold on one server at once (ConnLimits). A daemon needs one, and a
// second while a reconnect replaces a connection the server has not yet
// seen die; banks and brokers run as several replicas on one key; a
// user's commands are a handful at once; the admin's tools (up's own
// connections, the CLI, scripts) need more.
var MaxConnections = map[string]int{
	wire.RoleAgent:  4,
	wire.RoleBank:   8,
	wire.RoleBroker: 8,
	wire.RoleUser:   8,
	wire.RoleAdmin:  64,
}

// ConnLimits are the connection limits of principals by key: their role's
// MaxConnections. A principal of an unknown role gets none (it has no
// user either).
func ConnLimits(ps []wire.Principal) map[string]int {
	limits := make(map[string]int, len(ps))
	for _, p := range ps {
		if n, ok := MaxConnections[p.Role]; ok {
			limits[p.Key] = n
		}
	}
	return limits
}
