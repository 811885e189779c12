// Package attack is every way an attacker with a NATS connection on the
// same network tried to move or read money, as a test.
//
// The tests start a real market in-process (market.Start: the
// embedded NATS server, the bank on SQLite, the broker and one agent per
// host, each on its own connection) with two hosts, each running one VM of
// alice and one of bob, both users funded and spending. The attacker uses
// only what a process on the network has: a raw nats.go connection (with no
// credentials, or with one principal's own NKey seed from the market's
// creds/ directory — alice's, or a compromised agent's or broker's — and
// the CA in <data>/tls/ca.pem when the server speaks TLS), and
// signing.Signer to sign or seal whatever it forges. For each attack the
// suite asserts the secure behaviour:
//
//   - the attack is refused with a clear error (by the NATS server: a
//     refused connection or a permissions violation; or by the bank, broker
//     or agent: a forbidden reply), or it is simply not possible;
//   - the ledger dump (Bank.Ledger) and the plan set (Broker.Plans) are
//     unchanged, or where the market must keep running (ticks), money only
//     moved as the users signed;
//   - the market still serves: alice's signed balance and plans requests
//     succeed afterwards.
//
// # The attack table
//
// Every attack is a subtest of TestAttack (classes 01 to 15), of
// TestAttackTransport (16 to 20, the transport's authority) or of
// TestAttackPrivacy (21 to 24, reading another user's money),
// TestAttackKeys (25 to 27, the key lifecycle) and TestAttackMandates (28
// and 29, what a stolen agent or broker key can spend), named
// "<class>/<attack>", so
// `go test -tags libvirt_dlopen ./attack -v -run TestAttack` prints the
// table: one "--- PASS" or "--- FAIL" line per attack, the reason on
// failure ("NATS: …" for the transport's refusal, "broker: …" and the like
// for a component's), and the refusal it got ("refused: …"). The classes, in
// the order of docs/SECURITY.md's attack table:
//
//	01-unauthenticated   connect with no credentials, an unregistered key, no TLS
//	02-eavesdrop         subscribe to ">", to every inbox, to bob's inbox, to bank requests
//	03-queue-hijack      join mrm-bank (mrm.v1.bank.>, whois) or mrm-broker as a user
//	04-forged-registry   a whois answer calling an unregistered key an admin (agent, broker)
//	05-forged-state      host-1's state unsigned, sealed by another key or 1h ahead, by alice and the agents
//	06-plans-kv-user     put/delete/purge a plan, purge or delete the bucket, as alice
//	06-plans-kv-broker   broker's key: alice's plan onto bob's hold, budget ×100 (forged records); a key deleted
//	07-forged-reply      into bob's inbox; 'granted' from the bank's queue; capture errors to the agents
//	08-replay            a signed spend replayed to the broker, a second replica, after a restart
//	09-foreign-hold      bids (alice's; the broker key's, with her mandate or none), captures, releases
//	10-foreign-read      bob's balance and statement, a provider's statement, the ledger, as alice
//	11-flood             20k signed reads from bob; alice's balance and spend answered in 5s, not behind his backlog
//	12-id-squat          alice takes bob's hold id (HoldIDFor), transfer id, plan id first: his still apply, once
//	13-unknown-user      grants, income, a transfer to a name no user holds (or an agent's): not_found
//	14-unaudited-money   a grant while the audit stream is deleted: its event arrives once the stream is back, once
//	15-store-files       another local user reading bank.db, its WAL and shared memory: all 0600
//	16-stream-authority  the broker's, bank's or an agent's key adding _INBOX.> to a stream, creating one, shrinking, purging or deleting one
//	17-forged-flood      5,000 forgeries/s claiming alice's key: her p99 within twice her own; 5,000 at once: hers all answered
//	18-future-state      host-1's own key seals a state 110 s ahead: the agent's next real state replaces it
//	19-connections       alice's key opens 500 connections: the server keeps her limit
//	20-headers           a 100 KB Mrm-Order, 100 KB of other headers: bad_request
//	21-foreign-vms       mallory's and alice's vms: their own VMs, the others' per host only summed; the admin's all
//	22-host-states       mallory or another host's agent subscribing to host states, reading MRM_HOSTS
//	23-agent-state       mallory, alice or another host's agent asking host-1's agent for its state
//	24-audit-stream      mallory, the broker's or an agent's key reading MRM_EVENTS; the admin reads it
//	25-revoked-user      bob's key revoked: his connection closed, reconnects refused, his hold released; what it signs
//	                     (before or after, through alice's connection) refused by bank, broker and agent; his old record replayed
//	26-revoked-agent     host-2's key revoked: its connection closed, the host retired (no bids), its captures and states refused
//	27-rotated-agent     host-1's key rotated: the agent restarted with the new key charges on, its provider account keeps its
//	                     history, the old key's captures are refused
//	28-stolen-agent-key  host-1's key: a leg far above alice's VM's charge (cut to its share of her schedule), for a VM that does
//	                     not exist, for bob's VM on her hold, from the own hold of a user with no VM (refused)
//	29-stolen-broker-key the broker's key: a bid spending her 10-minute budget in 5 s, a hold expiring in 2036 or for any host,
//	                     her spend --more of one plan into another's hold: refused
//
// Classes 12 to 14 cannot be "refused" in the usual sense: alice's hold,
// transfer and plan of her own money are hers to make, and the grant is the
// admin's. What they assert is that the attack takes nothing from anyone:
// bob's requests apply and replay as if alice had done nothing, and no
// money moves without its audit event. Nor are 17 and 18: forgeries are
// refused one by one, and what is asserted is that alice does not pay for
// them; a state sealed by the host's own key is taken, and what is asserted
// is that it cannot outlive the agent's next one. 17 measures latency, so
// it runs alone (at a tenth of the rate under the race detector, which
// makes a signature check many times dearer). In 21 a user's answer is
// not refused but narrowed: what is asserted is that it names no other
// user's VM, plan or hold, and that its per-host aggregates are the
// public price's. 25 to 27 tick the market and check the money
// themselves: a revocation releases the revoked user's hold, and a
// rotated agent must go on charging. So does 28, whose first row is not
// refused but cut: what is asserted is that the stolen key takes no more
// than the VM's share of its plan's schedule (mandate.Allowed), what the
// honest agent could have charged 30 s later.
//
// BenchmarkSignedSpend measures one signed spend's round trip through a
// running market (ns/op, p50 and p99), for before/after comparisons.
package attack
