package main

import (
	"fmt"
	"regexp"
)

// goal is a bound the project holds a figure to: the figure of the
// benchmarks matching bench (in package pkg), in unit, below (less) or at
// least value.
type goal struct {
	pkg   string
	bench *regexp.Regexp
	unit  string
	less  bool
	value float64
}

// goals are the performance goals, from the scale issue: the bank's
// capture rate on PostgreSQL, spends through the market of processes, a
// bid's latency to libvirt with 64 domains, the broker's round at 100,000
// hosts (a churn round within the one-second tick, its signed bids), the
// simulator at 10,000 hosts.
var goals = []goal{
	{"bank", regexp.MustCompile(`^BenchmarkCapture/store=postgres/legs=1000$`), "legs/s", false, 100_000},
	{"bank", regexp.MustCompile(`^BenchmarkCapture/store=postgres/legs=100$`), "legs/s", false, 50_000},
	{"faults", regexp.MustCompile(`^BenchmarkMarket/.*/spends$`), "ops/s", false, 200},
	{"faults", regexp.MustCompile(`^BenchmarkMarket/.*/spends$`), "p99-ms", true, 250},
	{"agent/virt", regexp.MustCompile(`^BenchmarkBidToLibvirt/domains=64$`), "new-apply-p99-µs", true, 5000},
	{"broker", regexp.MustCompile(`^BenchmarkRound/hosts=100000/.*steady`), "ns/op", true, 1e9},
	{"broker", regexp.MustCompile(`^BenchmarkRound/hosts=100000/.*churn`), "ns/op", true, 1e9},
	{"broker", regexp.MustCompile(`^BenchmarkRound/hosts=100000/.*churn`), "bids/s", false, 50_000},
	{"hadoopvm/sim", regexp.MustCompile(`^BenchmarkScale/hosts=10000/`), "wall-s", true, 60},
}

// goalOf is the goal f is held to, if any.
func goalOf(f figure) (goal, bool) {
	for _, g := range goals {
		if g.pkg == f.pkg && g.unit == f.unit && g.bench.MatchString(f.bench) {
			return g, true
		}
	}
	return goal{}, false
}

// String is the goal beside v: its bound, and whether v meets it or by
// what factor it misses.
func (g goal) String(v float64) string {
	op, met, by := "≥", v >= g.value, g.value/v
	if g.less {
		op, met, by = "<", v < g.value, v/g.value
	}
	if met {
		return fmt.Sprintf("%s %s met", op, number(g.value))
	}
	return fmt.Sprintf("%s %s missed %.2g×", op, number(g.value), by)
}
