package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/mrmarket/mrmarket/broker
BenchmarkRound/hosts=100000/steady-2         	       1	1500000000 ns/op
BenchmarkRound/hosts=100000/churn/old-2      	       1	2000000000 ns/op	     35776 bids/s
BenchmarkRound/hosts=100000/churn/new-2      	       1	 500000000 ns/op	     71552 bids/s
pkg: github.com/mrmarket/mrmarket/agent/virt
BenchmarkBidToLibvirt/domains=1
    e2e_test.go:47: no QEMU
--- SKIP: BenchmarkBidToLibvirt/domains=1
BenchmarkBidToLibvirt/domains=64
BenchmarkBidToLibvirt/domains=64-2 	1	5 ns/op	100 old-apply-p99-µs	25 new-apply-p99-µs	12 B/op
PASS
`

func TestTable(t *testing.T) {
	tb := parse(strings.NewReader(sample))
	var out strings.Builder
	tb.print(&out)
	got := out.String()
	for _, want := range []string{
		"broker  Round/hosts=100000/steady      1.5e+09  ns/op  < 1e+09 missed 1.5×",
		"broker  Round/hosts=100000/churn/new   71552    bids/s  ≥ 50000 met  2×",
		"agent/virt  BidToLibvirt/domains=64    25       new-apply-p99-µs  < 5000 met  0.25×",
		"not run: agent/virt BenchmarkBidToLibvirt/domains=1: e2e_test.go:47: no QEMU",
	} {
		if !strings.Contains(strings.Join(strings.Fields(got), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "B/op") {
		t.Errorf("the table shows B/op:\n%s", got)
	}
}
