package virt

import (
	"encoding/xml"
	"fmt"
	"sync"
	"sync/atomic"

	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// domainCache is the enforcer's view of its managed domains (see the
// package doc, "Which domains are cached"): filled by a full listing, kept
// current between listings by libvirt's lifecycle and metadata events, and
// listed again in full by every VMs call (the agent's tick), which repairs
// whatever an event missed. Without events every call lists, as a cache
// nothing keeps current must not be trusted. A goroutine of its own reads
// the domains events name, so a bid never waits on another domain's event.
type domainCache struct {
	// mu is held across a full listing, so that concurrent callers wait
	// for one listing rather than each making one.
	mu       sync.Mutex
	byName   map[string]*domain
	listed   bool  // a full listing has filled byName
	watching bool  // the events below are registered
	events   []int // their callback ids

	// dirtyMu guards dirty, the domains an event named since they were
	// last read; the event callbacks take only this lock, never one held
	// across a libvirt call. wake tells the reader there are some; stop
	// ends it, done says it has ended.
	dirtyMu    sync.Mutex
	dirty      map[string]bool
	wake       chan struct{}
	stop, done chan struct{}
}

// domain is one cached managed domain and what the enforcer last set on it.
type domain struct {
	dom   *libvirt.Domain
	id    uint   // libvirt's id of the running domain: a restart changes it
	uuid  string // a domain of the same name created anew has another
	owner string
	// weight is the cpu_shares in force as the enforcer last set or read
	// them, 0 when unknown; Apply calls libvirt only when it changes.
	weight uint64
	blkio  uint // likewise the blkio weight, in disk weights mode
	// uncapped: uncap has run on this domain since it started.
	uncapped bool
}

// eventLoop is libvirt's default event loop, which delivers the domain
// events: registered once per process, before the connections that are to
// receive events are opened (the remote driver watches its socket only if
// a loop exists at open time), and run by one goroutine for good.
var eventLoop struct {
	once    sync.Once
	err     error
	stopped atomic.Bool // the loop failed: no more events will come
}

func startEventLoop() error {
	eventLoop.once.Do(func() {
		if eventLoop.err = libvirt.EventRegisterDefaultImpl(); eventLoop.err != nil {
			return
		}
		go func() {
			for libvirt.EventRunDefaultImpl() == nil {
			}
			eventLoop.stopped.Store(true)
		}()
	})
	return eventLoop.err
}

// watch registers the lifecycle and metadata-change events on conn; on
// failure the cache lists at every call.
func (c *domainCache) watch(conn *libvirt.Connect) {
	c.byName, c.dirty, c.wake = map[string]*domain{}, map[string]bool{}, make(chan struct{}, 1)
	if startEventLoop() != nil {
		return
	}
	lifecycle, err := conn.DomainEventLifecycleRegister(nil, func(_ *libvirt.Connect, d *libvirt.Domain, _ *libvirt.DomainEventLifecycle) {
		c.touched(d)
	})
	if err != nil {
		return
	}
	metadata, err := conn.DomainEventMetadataChangeRegister(nil, func(_ *libvirt.Connect, d *libvirt.Domain, _ *libvirt.DomainEventMetadataChange) {
		c.touched(d)
	})
	if err != nil {
		_ = conn.DomainEventDeregister(lifecycle)
		return
	}
	c.events, c.watching = []int{lifecycle, metadata}, true
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go c.follow(conn)
}

// follow reads the domains events name, until stop.
func (c *domainCache) follow(conn *libvirt.Connect) {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		c.dirtyMu.Lock()
		names := c.dirty
		c.dirty = map[string]bool{}
		c.dirtyMu.Unlock()
		for name := range names {
			c.refresh(conn, name)
		}
	}
}

// touched marks the domain an event names to be read again. It runs on the
// event loop: GetName reads the handle, no call to libvirtd.
func (c *domainCache) touched(d *libvirt.Domain) {
	name, err := d.GetName()
	if err != nil {
		return
	}
	c.mark(name)
}

// mark has the reader read name again.
func (c *domainCache) mark(name string) {
	c.dirtyMu.Lock()
	c.dirty[name] = true
	c.dirtyMu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default: // a wake-up is pending: the reader will see name
	}
}

// close deregisters the events, stops the reader and frees the cached
// handles.
func (c *domainCache) close(conn *libvirt.Connect) {
	for _, id := range c.events {
		_ = conn.DomainEventDeregister(id)
	}
	if c.stop != nil {
		close(c.stop)
		<-c.done
		c.stop = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.byName {
		_ = d.dom.Free()
	}
	c.byName, c.listed, c.watching, c.events = map[string]*domain{}, false, false, nil
}

// current brings the cache up to date, under mu, with a full listing when
// asked (full), when nothing has filled it yet or when no events keep it.
func (c *domainCache) current(conn *libvirt.Connect, full bool) error {
	if full || !c.listed || !c.watching || eventLoop.stopped.Load() {
		return c.list(conn)
	}
	return nil
}

// unkept drops what an unwatched cache read (its caller has taken its own
// references): nothing would keep it current, and its handles would hold
// a borrowed connection open.
func (c *domainCache) unkept() {
	if c.watching {
		return
	}
	for _, d := range c.byName {
		_ = d.dom.Free()
	}
	c.byName, c.listed = map[string]*domain{}, false
}

// list reads every active domain, keeping the entries (and what was set on
// them) of those unchanged since.
func (c *domainCache) list(conn *libvirt.Connect) error {
	doms, err := conn.ListAllDomains(libvirt.CONNECT_LIST_DOMAINS_ACTIVE)
	if err != nil {
		return fmt.Errorf("virt: listing domains: %w", err)
	}
	next := make(map[string]*domain, len(doms))
	for i := range doms {
		d := &doms[i]
		name, owner, ok := managedName(d)
		if !ok {
			_ = d.Free()
			continue
		}
		next[name] = c.keep(name, d, owner)
	}
	for name, old := range c.byName {
		if next[name] != old {
			_ = old.dom.Free()
		}
	}
	c.byName, c.listed = next, true
	return nil
}

// refresh reads one domain again: gone, no longer managed, or (re)started.
// It calls libvirt without mu, so a bid does not wait for it; an event
// after the read marks the domain again, and the next read wins.
func (c *domainCache) refresh(conn *libvirt.Connect, name string) {
	var d *libvirt.Domain
	var owner string
	if h, err := conn.LookupDomainByName(name); err == nil {
		if active, err := h.IsActive(); err == nil && active {
			if n, o, ok := managedName(h); ok && n == name {
				d, owner = h, o
			}
		}
		if d == nil {
			_ = h.Free()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.byName[name]
	var fresh *domain
	if d != nil {
		fresh = c.keep(name, d, owner) // d is keep's now
	}
	if old != nil && old != fresh {
		_ = old.dom.Free()
	}
	if fresh == nil {
		delete(c.byName, name)
	} else {
		c.byName[name] = fresh
	}
}

// keep returns the cached entry for name if d is the same running domain
// with the same owner (freeing d, which is then not needed), else a new
// entry holding d.
func (c *domainCache) keep(name string, d *libvirt.Domain, owner string) *domain {
	id, _ := d.GetID()
	uuid, _ := d.GetUUIDString()
	if old := c.byName[name]; old != nil && old.id == id && old.uuid == uuid && old.owner == owner {
		_ = d.Free()
		return old
	}
	return &domain{dom: d, id: id, uuid: uuid, owner: owner}
}

// forget drops what is known to be set on a domain a call failed on, and
// has it read again: its handle may be stale (the domain restarted anew).
func (c *domainCache) forget(name string) {
	c.mu.Lock()
	if d := c.byName[name]; d != nil {
		d.weight, d.blkio, d.uncapped = 0, 0, false
	}
	c.mu.Unlock()
	c.mark(name)
}

// managedName reads d's name and mrmarket's metadata: whether it is managed,
// and by whom it is owned.
func managedName(d *libvirt.Domain) (name, owner string, ok bool) {
	name, err := d.GetName()
	if err != nil || wire.CheckName("vm", name) != nil {
		return "", "", false
	}
	meta, err := d.GetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, Namespace, libvirt.DOMAIN_AFFECT_LIVE)
	var m vmMeta
	if err != nil || xml.Unmarshal([]byte(meta), &m) != nil || wire.CheckName("owner", m.Owner) != nil {
		return "", "", false
	}
	return name, m.Owner, true
}

// managed lists the managed domains from the cache (a full listing when
// full): each handle is the caller's own reference, to Free; the cache may
// drop its own meanwhile.
func (e *Enforcer) managed() (map[string]*libvirt.Domain, map[string]string, error) {
	return e.managedFrom(false)
}

func (e *Enforcer) managedFrom(full bool) (map[string]*libvirt.Domain, map[string]string, error) {
	c := &e.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.current(e.conn, full); err != nil {
		return nil, nil, err
	}
	byName, owners := make(map[string]*libvirt.Domain, len(c.byName)), make(map[string]string, len(c.byName))
	for name, d := range c.byName {
		if d.dom.Ref() != nil {
			continue
		}
		h := *d.dom
		byName[name], owners[name] = &h, d.owner
	}
	c.unkept()
	return byName, owners, nil
}

// target is a cached domain as Apply sees it: a handle reference of its
// own (to Free) and what the enforcer last set on it.
type target struct {
	dom      *libvirt.Domain
	entry    *domain
	weight   uint64
	blkio    uint
	uncapped bool
}

// targets are the cached managed domains among names (all when nil).
func (e *Enforcer) targets(names map[string]float64) (map[string]target, error) {
	c := &e.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.current(e.conn, false); err != nil {
		return nil, err
	}
	out := make(map[string]target, len(names))
	for name, d := range c.byName {
		if _, named := names[name]; names != nil && !named || d.dom.Ref() != nil {
			continue
		}
		h := *d.dom
		out[name] = target{dom: &h, entry: d, weight: d.weight, blkio: d.blkio, uncapped: d.uncapped}
	}
	c.unkept()
	return out, nil
}

func freeTargets(targets map[string]target) {
	for _, t := range targets {
		_ = t.dom.Free()
	}
}

// record updates what is set on a cached domain, unless the cache has
// replaced its entry since (the domain restarted: nothing is set on it).
func (c *domainCache) record(name string, entry *domain, set func(*domain)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName[name] == entry {
		set(entry)
	}
}

func freeAll(doms map[string]*libvirt.Domain) {
	for _, d := range doms {
		_ = d.Free()
	}
}
