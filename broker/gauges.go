package broker

import (
	"sort"

	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Gauges are the broker's figures a scrape reads (obs.Metrics.SetBroker):
// how old each host's newest state is, at the broker's clock against the
// time the state claims (what price shows as updated), and how many
// deadline jobs run past their deadline. A retired host is left out: its
// age grows for good and says nothing about an agent to look at.
func (b *Broker) Gauges() obs.BrokerFigures {
	now := b.cfg.Now()
	var f obs.BrokerFigures
	b.mu.Lock()
	for h, st := range b.hosts {
		if _, retired := b.retired[h]; !retired {
			f.Hosts = append(f.Hosts, obs.HostAge{Host: h, Age: max(now.Sub(st.Time), 0)})
		}
	}
	b.mu.Unlock()
	sort.Slice(f.Hosts, func(i, j int) bool { return f.Hosts[i].Host < f.Hosts[j].Host })
	b.store.each(func(rec *planRecord, _ uint64) {
		if j := rec.Job; j != nil && !j.Done && !j.Deadline.IsZero() && now.After(j.Deadline) && rec.Plan.Status == wire.PlanRunning {
			f.LateJobs++
		}
	})
	return f
}
