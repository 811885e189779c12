package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestVMsAsAUser: `vms` shows a user its own VMs with their bids and, of
// bob's, only the host's other VMs together (count, rate, share) — in the
// table and in --json; bob's VMs by name are refused; the admin sees both.
func TestVMsAsAUser(t *testing.T) {
	m, clock := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "100", "alice", "bob")
	for _, s := range [][]string{{"alice", "12", "a1"}, {"bob", "6", "b1"}} {
		if r := mrmarket("spend", n, "--user", s[0], "--budget", s[1], "--duration", "1h", "--vm", s[2], "--id", "p-"+s[0]); r.code != 0 {
			t.Fatalf("%s spends: %+v", s[0], r)
		}
	}
	*clock = clock.Add(10 * time.Second)
	if err := m.Tick(context.Background(), *clock); err != nil {
		t.Fatal(err)
	}

	r := mrmarket("vms", n, "--user", "alice", "--json")
	var rep wire.VMsReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
		t.Fatalf("alice's vms --json: %+v", r)
	}
	if len(rep.VMs) != 1 || rep.VMs[0].VM != "a1" || len(rep.VMs[0].Bids) != 1 || rep.VMs[0].Bids[0].Plan != "p-alice" {
		t.Errorf("alice sees her own VM with its bid: %+v", rep.VMs)
	}
	if len(rep.Others) != 1 ||
		rep.Others[0] != (wire.OtherVMs{Host: "host-1", VMs: 1, Rate: rep.Others[0].Rate, Share: rep.Others[0].Share, Updated: rep.Others[0].Updated}) ||
		rep.Others[0].Rate <= 0 || rep.Others[0].Share <= 0 {
		t.Errorf("alice sees the others' VMs on host-1 together: %+v", rep.Others)
	}
	for _, secret := range []string{"bob", "b1", "p-bob"} {
		if strings.Contains(r.stdout, secret) {
			t.Errorf("alice's vms --json shows %q: %s", secret, r.stdout)
		}
	}
	r = mrmarket("vms", n, "--user", "alice")
	if r.code != 0 || !strings.Contains(r.stdout, "p-alice") || !strings.Contains(r.stdout, "(1 VM)") || !strings.Contains(r.stdout, "(others)") ||
		strings.Contains(r.stdout, "bob") || strings.Contains(r.stdout, "b1") {
		t.Errorf("alice's vms: %+v", r)
	}
	if r := mrmarket("vms", n, "--user", "alice", "--owner", "bob"); r.code != cli.ExitRefused || !strings.Contains(r.stderr, "bob") {
		t.Errorf("alice lists bob's VMs: %+v", r)
	}
	r = mrmarket("vms", n)
	if r.code != 0 || !strings.Contains(r.stdout, "p-alice") || !strings.Contains(r.stdout, "p-bob") || strings.Contains(r.stdout, "(others)") {
		t.Errorf("the admin's vms: %+v", r)
	}
}

// TestEventsAsAUser: the audit stream is the admin's; a user with only its
// own key is refused forbidden, at once rather than at a time-out.
func TestEventsAsAUser(t *testing.T) {
	m, _ := startMarket(t)
	aliceOnly := signing.CredsDir(t.TempDir())
	alice, err := m.Keys().Signer(wire.RoleUser, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := signing.SaveSigner(aliceOnly.Path(wire.RoleUser, "alice"), alice); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(filepath.Dir(string(m.Keys())), "tls", "ca.pem")
	// What a request alice may make costs here now (the process, TLS, a
	// signed round trip): a refusal that waited out a request's time-out
	// takes that much longer, however busy the machine.
	start := time.Now()
	if r := mrmarket("--tls-ca", ca, "vms", "--nats="+m.URL, "--creds", string(aliceOnly), "--user", "alice"); r.code != 0 {
		t.Fatalf("alice's own VMs: %+v", r)
	}
	baseline := time.Since(start)
	start = time.Now()
	r := mrmarket("--tls-ca", ca, "events", "--nats="+m.URL, "--creds", string(aliceOnly))
	if r.code != cli.ExitRefused || !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("alice reads the audit stream: %+v", r)
	}
	if took := time.Since(start); took > baseline+rpc.DefaultTimeout/2 {
		t.Errorf("the refusal took %v, a permitted request %v", took, baseline)
	}
}
