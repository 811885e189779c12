// Package mrmarket_test runs the README: the product's front door must
// never drift from the product.
//
// TestREADME builds bin/mrmarket, starts `mrmarket up` as the README
// starts it (`--data .data --hosts 3 --vms-per-host 2 --users alice,bob`),
// in a fresh directory where ./bin/mrmarket is the binary just built and
// ./examples the repository's examples, and runs every line of each ```sh
// block that follows a `<!-- readme-test -->` comment, in order, with bash.
// A line fails the test when it exits non-zero or prints an error
// ("mrmarket:" or "Incorrect Usage" on stderr). The rewrites, the only
// ones: `up` also gets `--listen` and `--http` on free ports, and every
// 4222 in a block becomes the free NATS port; an `export NAME=value` line
// sets NAME for the lines after it (each line runs in its own bash).
package mrmarket_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// readmeBlocks are the ```sh blocks of path marked <!-- readme-test -->.
func readmeBlocks(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks [][]string
	var cur []string
	marked, in := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case in && strings.HasPrefix(line, "```"):
			blocks, cur, in, marked = append(blocks, cur), nil, false, false
		case in:
			cur = append(cur, line)
		case strings.TrimSpace(line) == "<!-- readme-test -->":
			marked = true
		case marked && line == "```sh":
			in = true
		case strings.TrimSpace(line) != "":
			marked = false // the marker applies to the block right after it
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("the README test starts a whole market (go test -short skips it)")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("the README's blocks run with bash: %v", err)
	}
	blocks := readmeBlocks(t, "README.md")
	if len(blocks) < 3 {
		t.Fatalf("README.md has %d blocks marked <!-- readme-test -->, want the walkthrough, strategies and deadlines", len(blocks))
	}
	repo, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "mrmarket")
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the README test builds mrmarket with go: %v", err)
	}
	if out, err := exec.Command(gocmd, "build", "-tags", "libvirt_dlopen", "-o", bin, "./cli/mrmarket").CombinedOutput(); err != nil {
		t.Fatalf("building mrmarket: %v\n%s", err, out)
	}
	if err := os.Symlink(filepath.Join(repo, "examples"), filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}

	port, httpPort := freePort(t), freePort(t)
	var upOut bytes.Buffer
	up := exec.Command(bin, "up", "--data", ".data", "--hosts", "3", "--vms-per-host", "2", "--users", "alice,bob",
		"--listen", "127.0.0.1:"+port, "--http", "127.0.0.1:"+httpPort)
	up.Dir, up.Stdout, up.Stderr = dir, &upOut, &upOut
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- up.Wait() }()
	t.Cleanup(func() {
		_ = up.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = up.Process.Kill()
			<-exited
		}
	})

	env := append(os.Environ(), "MRM_NATS_URL=nats://127.0.0.1:"+port)
	env = withoutMRM(env)
	run := func(line string) (stdout, stderr string, err error) {
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir, cmd.Env = dir, env
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		return o.String(), e.String(), err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, stderr, err := run("./bin/mrmarket vms")
		if err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("mrmarket up exited: %v\n%s", err, upOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mrmarket up not ready after 90 s: %s\n%s", stderr, upOut.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	for i, block := range blocks {
		for _, line := range block {
			line = strings.ReplaceAll(line, "4222", port)
			trimmed := strings.TrimSpace(line)
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			if name, value, ok := strings.Cut(strings.TrimPrefix(trimmed, "export "), "="); ok && strings.HasPrefix(trimmed, "export ") {
				env = append(env, name+"="+value)
				continue
			}
			stdout, stderr, err := run(line)
			t.Logf("block %d: %s\n%s%s", i+1, trimmed, stdout, stderr)
			if err != nil || strings.Contains(stderr, "mrmarket:") || strings.Contains(stderr, "Incorrect Usage") {
				t.Errorf("README block %d: %s: %v\n%s%s", i+1, trimmed, err, stdout, stderr)
			}
		}
	}
}

// withoutMRM drops the MRM_ variables of the caller's environment but
// MRM_NATS_URL, so the README runs as on a fresh machine.
func withoutMRM(env []string) []string {
	out := env[:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, "MRM_") && !strings.HasPrefix(kv, "MRM_NATS_URL=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// TestExamplesMatchUp: every file in examples/ is a valid job or plan file
// on the VMs of `up --hosts 3 --vms-per-host 2 --users alice,bob`, all of
// one owner, so the README's commands can use them as they are.
func TestExamplesMatchUp(t *testing.T) {
	hosts, err := market.Layout(3, 2, []string{"alice", "bob"})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for _, h := range hosts {
		for _, vm := range h.VMs {
			owner[vm.ID] = vm.Owner
		}
	}
	files, err := filepath.Glob("examples/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := func(v any) error {
			d := json.NewDecoder(bytes.NewReader(data))
			d.DisallowUnknownFields()
			return d.Decode(v)
		}
		var vms []string
		var plan struct {
			Workflows []wire.WorkflowSpec `json:"workflows"`
		}
		var job wire.JobSpec
		switch {
		case dec(&plan) == nil && len(plan.Workflows) > 0:
			req := wire.SpendRequest{User: "alice", Budget: 20_000_000, Duration: wire.Duration(time.Hour), Strategy: wire.StrategyStage, Workflows: plan.Workflows}
			for _, w := range plan.Workflows {
				for _, s := range w.Stages {
					vms = append(vms, s.VMs...)
				}
			}
			if err := req.Validate(); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		case dec(&job) == nil:
			vms = job.VMs
			if err := job.Validate(); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		default:
			t.Errorf("%s is neither a plan file nor a job file", f)
			continue
		}
		for _, vm := range vms {
			if owner[vm] == "" || owner[vm] != owner[vms[0]] {
				t.Errorf("%s: VM %q is not one of up's VMs of one owner (%q owns it)", f, vm, owner[vm])
			}
		}
	}
}
