package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Backends returns the ready endpoints (address and target port) of one Service port at the
// moment a connection or UDP flow starts.
type Backends func() []netip.AddrPort

// Forwarder carries traffic from one load-balancer address:port to a Service's endpoints.
type Forwarder interface {
	// Close stops listening and ends the connections and flows in progress.
	Close()
}

const (
	dialTimeout    = 5 * time.Second
	udpIdleTimeout = 60 * time.Second
	udpBufferSize  = 64 * 1024
)

// picker spreads new connections round-robin over the endpoints.
type picker struct{ next atomic.Uint64 }

// order returns eps rotated to start at the next endpoint in turn, so a failed dial can fall
// through to the others.
func (p *picker) order(eps []netip.AddrPort) []netip.AddrPort {
	if len(eps) == 0 {
		return nil
	}
	start := int(p.next.Add(1)-1) % len(eps)
	return append(append([]netip.AddrPort(nil), eps[start:]...), eps[:start]...)
}

// tcpForwarder accepts on the load-balancer address and splices each connection to an endpoint.
type tcpForwarder struct {
	ln       net.Listener
	backends Backends
	log      *slog.Logger
	pick     picker

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// ListenTCP starts forwarding TCP from addr to backends.
func ListenTCP(addr netip.AddrPort, backends Backends, log *slog.Logger) (Forwarder, error) {
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, err
	}
	f := &tcpForwarder{ln: ln, backends: backends, log: log, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *tcpForwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				f.log.Warn("accept failed", "error", err)
			}
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.untrack(c)
			f.handle(c)
		}()
	}
}

func (f *tcpForwarder) handle(down net.Conn) {
	defer down.Close()
	eps := f.pick.order(f.backends())
	if len(eps) == 0 {
		f.log.Debug("no ready endpoint", "client", down.RemoteAddr())
		return
	}
	var up net.Conn
	for _, ep := range eps {
		c, err := net.DialTimeout("tcp", ep.String(), dialTimeout)
		if err == nil {
			up = c
			break
		}
		f.log.Debug("endpoint dial failed", "endpoint", ep, "error", err)
	}
	if up == nil {
		f.log.Info("no endpoint answered", "client", down.RemoteAddr(), "endpoints", len(eps))
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { copyHalf(up, down); done <- struct{}{} }()
	go func() { copyHalf(down, up); done <- struct{}{} }()
	<-done
	<-done
}

// copyHalf copies src to dst and then closes dst's write side, keeping half-closed TCP intact.
func copyHalf(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

func (f *tcpForwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *tcpForwarder) untrack(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

func (f *tcpForwarder) Close() {
	f.mu.Lock()
	f.closed = true
	_ = f.ln.Close()
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// udpForwarder keeps one flow per client address: a socket connected to the endpoint chosen
// for that client, whose replies go back to the client from the load-balancer address.
type udpForwarder struct {
	conn     *net.UDPConn
	backends Backends
	log      *slog.Logger
	pick     picker
	ctx      context.Context
	cancel   context.CancelFunc

	mu    sync.Mutex
	flows map[netip.AddrPort]*net.UDPConn
	wg    sync.WaitGroup
}

// ListenUDP starts forwarding UDP from addr to backends.
func ListenUDP(addr netip.AddrPort, backends Backends, log *slog.Logger) (Forwarder, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &udpForwarder{conn: conn, backends: backends, log: log, ctx: ctx, cancel: cancel, flows: map[netip.AddrPort]*net.UDPConn{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *udpForwarder) serve() {
	defer f.wg.Done()
	buf := make([]byte, udpBufferSize)
	for {
		n, client, err := f.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				f.log.Warn("udp read failed", "error", err)
			}
			return
		}
		up := f.flow(client)
		if up == nil {
			continue
		}
		_ = up.SetReadDeadline(time.Now().Add(udpIdleTimeout))
		if _, err := up.Write(buf[:n]); err != nil {
			f.log.Debug("udp write to endpoint failed", "client", client, "error", err)
		}
	}
}

// flow returns the socket of client's flow, opening one to the next endpoint when it has none.
func (f *udpForwarder) flow(client netip.AddrPort) *net.UDPConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if up, ok := f.flows[client]; ok {
		return up
	}
	if f.ctx.Err() != nil {
		return nil
	}
	eps := f.pick.order(f.backends())
	if len(eps) == 0 {
		f.log.Debug("no ready endpoint", "client", client)
		return nil
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(eps[0]))
	if err != nil {
		f.log.Info("udp endpoint dial failed", "endpoint", eps[0], "error", err)
		return nil
	}
	f.flows[client] = up
	f.wg.Add(1)
	go f.reply(client, up)
	return up
}

// reply sends the endpoint's datagrams back to client until the flow is idle or closed.
func (f *udpForwarder) reply(client netip.AddrPort, up *net.UDPConn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		if f.flows[client] == up {
			delete(f.flows, client)
		}
		f.mu.Unlock()
		_ = up.Close()
	}()
	buf := make([]byte, udpBufferSize)
	for {
		_ = up.SetReadDeadline(time.Now().Add(udpIdleTimeout))
		n, err := up.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed) {
				return
			}
			// ICMP unreachable from a restarting endpoint: keep the flow, the client retries.
			if f.ctx.Err() != nil {
				return
			}
			f.log.Debug("udp read from endpoint failed", "client", client, "error", err)
			continue
		}
		if _, err := f.conn.WriteToUDPAddrPort(buf[:n], client); err != nil {
			f.log.Debug("udp reply failed", "client", client, "error", err)
		}
	}
}

func (f *udpForwarder) Close() {
	f.cancel()
	_ = f.conn.Close()
	f.mu.Lock()
	for _, up := range f.flows {
		_ = up.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
