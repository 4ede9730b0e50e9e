package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
)

// Interface holds the load-balancer addresses: each assigned address is added to it as a host
// address (/32 or /128), so the host answers on it and pods on the same bridge reach it.
type Interface struct {
	link netlink.Link
}

// OpenInterface finds the link called name; with create a missing link is created as an empty
// bridge and set up (for hosts without the cluster bridge; a bridge rather than a dummy because
// containers often lack the dummy module).
func OpenInterface(name string, create bool) (*Interface, error) {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) && create {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			return nil, fmt.Errorf("creating bridge %s: %w", name, err)
		}
		link, err = netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkSetUp(link)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	return &Interface{link: link}, nil
}

func hostPrefix(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

// Add puts a on the interface; an address already there is fine.
func (i *Interface) Add(a netip.Addr) error {
	err := netlink.AddrAdd(i.link, &netlink.Addr{IPNet: hostPrefix(a)})
	if err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("adding %s to %s: %w", a, i.link.Attrs().Name, err)
	}
	return nil
}

// Remove takes a off the interface; an address already gone is fine.
func (i *Interface) Remove(a netip.Addr) error {
	err := netlink.AddrDel(i.link, &netlink.Addr{IPNet: hostPrefix(a)})
	if err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("removing %s from %s: %w", a, i.link.Attrs().Name, err)
	}
	return nil
}

// HostAddresses lists the host addresses (/32, /128) on the interface that satisfy keep.
func (i *Interface) HostAddresses(keep func(netip.Addr) bool) ([]netip.Addr, error) {
	list, err := netlink.AddrList(i.link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", i.link.Attrs().Name, err)
	}
	var out []netip.Addr
	for _, a := range list {
		ones, bits := a.Mask.Size()
		ip, ok := netip.AddrFromSlice(a.IP)
		if ok && ones == bits && keep(ip.Unmap()) {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}
