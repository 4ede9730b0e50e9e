package main

import (
	"errors"
	"net/netip"
	"testing"
)

func mustPool(t *testing.T, cidr string) *Pool {
	t.Helper()
	p, err := NewPool(netip.MustParsePrefix(cidr))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestPoolHandsOutFreeAddressesSkippingNetworkAndBroadcast(t *testing.T) {
	p := mustPool(t, "10.244.255.0/30")
	a, err := p.Assign("ns/a", nil, nil)
	if err != nil || a[0] != netip.MustParseAddr("10.244.255.1") {
		t.Fatalf("first: %v %v", a, err)
	}
	b, err := p.Assign("ns/b", nil, nil)
	if err != nil || b[0] != netip.MustParseAddr("10.244.255.2") {
		t.Fatalf("second: %v %v", b, err)
	}
	if _, err := p.Assign("ns/c", nil, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("third: want ErrExhausted, got %v", err)
	}
	// Assigning again keeps the address.
	if again, _ := p.Assign("ns/a", nil, nil); again[0] != a[0] {
		t.Fatalf("reassign moved %v to %v", a, again)
	}
	p.Release("ns/a")
	if c, err := p.Assign("ns/c", nil, nil); err != nil || c[0] != a[0] {
		t.Fatalf("after release: %v %v", c, err)
	}
}

func TestPoolHonoursRequestedAddresses(t *testing.T) {
	p := mustPool(t, "10.244.255.0/24")
	got, err := p.Assign("ns/a", addrs("10.244.255.200", "10.244.255.201"), nil)
	if err != nil || len(got) != 2 {
		t.Fatalf("requested: %v %v", got, err)
	}
	if _, err := p.Assign("ns/b", addrs("10.244.255.200"), nil); !errors.Is(err, ErrInUse) {
		t.Fatalf("taken address: want ErrInUse, got %v", err)
	}
	if _, err := p.Assign("ns/b", addrs("10.244.254.9"), nil); !errors.Is(err, ErrNotInPool) {
		t.Fatalf("outside: want ErrNotInPool, got %v", err)
	}
	if _, err := p.Assign("ns/b", addrs("10.244.255.255"), nil); !errors.Is(err, ErrNotInPool) {
		t.Fatalf("broadcast: want ErrNotInPool, got %v", err)
	}
	// Changing the request releases the old addresses.
	if got, err := p.Assign("ns/a", addrs("10.244.255.7"), nil); err != nil || got[0] != netip.MustParseAddr("10.244.255.7") {
		t.Fatalf("changed request: %v %v", got, err)
	}
	if o, ok := p.Owner(netip.MustParseAddr("10.244.255.200")); ok {
		t.Fatalf("old requested address still owned by %s", o)
	}
	// An unmet request leaves the Service without addresses.
	if _, err := p.Assign("ns/a", addrs("10.1.1.1"), nil); err == nil {
		t.Fatal("want an error")
	}
	if o, ok := p.Owner(netip.MustParseAddr("10.244.255.7")); ok {
		t.Fatalf("address of an unmet request still owned by %s", o)
	}
}

func TestPoolPrefersTheAddressAlreadyInStatus(t *testing.T) {
	p := mustPool(t, "10.244.255.0/24")
	got, err := p.Assign("ns/a", nil, addrs("192.0.2.1", "10.244.255.42"))
	if err != nil || got[0] != netip.MustParseAddr("10.244.255.42") {
		t.Fatalf("current: %v %v", got, err)
	}
	// Another Service reporting the same address in its status does not take it over.
	got, err = p.Assign("ns/b", nil, addrs("10.244.255.42"))
	if err != nil || got[0] == netip.MustParseAddr("10.244.255.42") {
		t.Fatalf("stolen: %v %v", got, err)
	}
}

func TestPoolOfOneAddress(t *testing.T) {
	p := mustPool(t, "127.0.77.9/32")
	if got, err := p.Assign("ns/a", nil, nil); err != nil || got[0] != netip.MustParseAddr("127.0.77.9") {
		t.Fatalf("%v %v", got, err)
	}
}
