package main

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// Errors of Pool.Assign. A Service whose request cannot be met gets no address at all, as a
// cloud load balancer leaves it pending.
var (
	ErrNotInPool = errors.New("address is not in the pool")
	ErrInUse     = errors.New("address is assigned to another Service")
	ErrExhausted = errors.New("no free address left in the pool")
)

// Pool hands out the addresses of one prefix to Services, each address to at most one Service.
// The prefix's network and broadcast addresses are never handed out.
type Pool struct {
	prefix netip.Prefix

	mu    sync.Mutex
	owner map[netip.Addr]string // address -> Service key (namespace/name)
}

// NewPool returns an empty pool over prefix (for example 10.244.255.0/24).
func NewPool(prefix netip.Prefix) (*Pool, error) {
	prefix = prefix.Masked()
	if !prefix.IsValid() || prefix.Bits() > prefix.Addr().BitLen()-2 && prefix.Bits() != prefix.Addr().BitLen() {
		return nil, fmt.Errorf("pool %s: a prefix of at least four addresses, or a single address, is needed", prefix)
	}
	return &Pool{prefix: prefix, owner: map[netip.Addr]string{}}, nil
}

// Contains reports whether a is an address this pool may hand out.
func (p *Pool) Contains(a netip.Addr) bool {
	if !p.prefix.Contains(a) {
		return false
	}
	if p.prefix.IsSingleIP() {
		return true
	}
	return a != p.prefix.Addr() && a != lastAddr(p.prefix)
}

// Assign gives key its addresses and returns them. With requested addresses (spec.loadBalancerIP
// or the address annotation) exactly those are assigned, or none when one is outside the pool or
// held by another Service. Without, key keeps what it holds (preferring current, the addresses
// of its status, so a restarted controller keeps addresses stable) or gets the first free one.
// Addresses key held but no longer gets are released.
func (p *Pool) Assign(key string, requested, current []netip.Addr) ([]netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	var want []netip.Addr
	switch {
	case len(requested) > 0:
		for _, a := range requested {
			if !p.Contains(a) {
				p.releaseLocked(key, nil)
				return nil, fmt.Errorf("%s: %w (%s)", a, ErrNotInPool, p.prefix)
			}
			if o, ok := p.owner[a]; ok && o != key {
				p.releaseLocked(key, nil)
				return nil, fmt.Errorf("%s: %w (%s)", a, ErrInUse, o)
			}
		}
		want = requested
	default:
		if held := p.heldLocked(key); len(held) > 0 {
			want = held[:1]
			break
		}
		for _, a := range current {
			if o, ok := p.owner[a]; p.Contains(a) && (!ok || o == key) {
				want = []netip.Addr{a}
				break
			}
		}
		if want == nil {
			free, ok := p.firstFreeLocked()
			if !ok {
				return nil, ErrExhausted
			}
			want = []netip.Addr{free}
		}
	}
	p.releaseLocked(key, want)
	for _, a := range want {
		p.owner[a] = key
	}
	return append([]netip.Addr(nil), want...), nil
}

// Release frees every address of key.
func (p *Pool) Release(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(key, nil)
}

// Owner returns the Service key holding a, if any.
func (p *Pool) Owner(a netip.Addr) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.owner[a]
	return o, ok
}

func (p *Pool) heldLocked(key string) []netip.Addr {
	var held []netip.Addr
	for a, o := range p.owner {
		if o == key {
			held = append(held, a)
		}
	}
	return held
}

// releaseLocked frees the addresses of key that are not in keep.
func (p *Pool) releaseLocked(key string, keep []netip.Addr) {
	for a, o := range p.owner {
		if o != key {
			continue
		}
		kept := false
		for _, k := range keep {
			kept = kept || k == a
		}
		if !kept {
			delete(p.owner, a)
		}
	}
}

func (p *Pool) firstFreeLocked() (netip.Addr, bool) {
	for a := p.prefix.Addr(); p.prefix.Contains(a); a = a.Next() {
		if _, taken := p.owner[a]; p.Contains(a) && !taken {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a.Unmap()
}
