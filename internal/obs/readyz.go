package obs

import (
	"fmt"
	"net/http"
	"sync"
)

// Readiness. /healthz says whether the process's components work; /readyz
// says whether what they depend on answers — NATS, the store, libvirt —
// one line per dependency, so that an operator (or a load balancer, or
// systemd's watchdog script) reads which one is down, and 503 when any
// is. A process declares its dependencies once they exist (Server.Ready);
// until then /readyz answers 503, not ready: a daemon still connecting is
// not ready either.

// Dependency is one thing a process needs to serve. One that a process of
// its kind may need but this one does not is declared with Unused saying
// why (up's and agent --sim's simulated hosts use no libvirt), so that
// /readyz shows it is not forgotten.
type Dependency struct {
	Name   string
	Check  HealthFunc
	Unused string
}

// Dependency names.
const (
	DepNATS    = "nats"
	DepStore   = "store"
	DepLibvirt = "libvirt"
)

// readiness answers /readyz.
type readiness struct {
	mu   sync.Mutex
	deps []Dependency
}

// Ready declares the process's dependencies, in the order /readyz lists
// them.
func (s *Server) Ready(deps ...Dependency) {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	s.ready.deps = append([]Dependency(nil), deps...)
}

func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	deps := r.deps
	r.mu.Unlock()
	if deps == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "starting: no dependencies declared yet")
		return
	}
	lines, down := make([]string, 0, len(deps)), false
	for _, d := range deps {
		switch {
		case d.Unused != "":
			lines = append(lines, fmt.Sprintf("%s not used: %s", d.Name, d.Unused))
		case d.Check == nil:
			lines = append(lines, d.Name+" ok")
		default:
			if err := d.Check(); err != nil {
				down = true
				lines = append(lines, fmt.Sprintf("%s down: %v", d.Name, err))
			} else {
				lines = append(lines, d.Name+" ok")
			}
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if down {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
