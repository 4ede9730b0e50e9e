// turna-bench-load: the load generators and backends of dataplane/bench/protocols.sh that no
// Debian package provides. Clients run for -duration and print one line of key=value pairs:
//
//	count=<completed units> seconds=<elapsed> rate=<units per second> errors=<failed attempts>
//
// (for stream-sink the units are bytes and rate is Gbit/s). Usage: turna-bench-load <command> -h.
//
//	grpc-server  -listen ADDR                       grpc-go's benchmark service (h2c)
//	grpc         -addr ADDR -mode unary|stream      unary RPCs, or ping-pong messages on streams
//	handshakes   -addr ADDR -sni NAME               new TLS 1.3 connections, one GET each
//	stream-source -listen ADDR [-cert C -key K]     writes to every connection as fast as it can
//	stream-sink  -addr ADDR [-sni NAME]             reads from connections (TLS with -sni)
//	udp-echo     -listen ADDR                       answers every datagram with itself
//	udp          -addr ADDR                         datagrams echoed per second
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/benchmark"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: turna-bench-load grpc-server|grpc|handshakes|stream-source|stream-sink|udp-echo|udp [flags]"))
	}
	commands := map[string]func([]string) error{
		"grpc-server":   grpcServer,
		"grpc":          grpcClient,
		"handshakes":    handshakes,
		"stream-source": streamSource,
		"stream-sink":   streamSink,
		"udp-echo":      udpEcho,
		"udp":           udpClient,
	}
	command, ok := commands[os.Args[1]]
	if !ok {
		fail(fmt.Errorf("unknown command %q", os.Args[1]))
	}
	if err := command(os.Args[2:]); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "turna-bench-load:", err)
	os.Exit(1)
}

// report prints a client's result line.
func report(count int64, elapsed time.Duration, rate float64, errs int64) {
	fmt.Printf("count=%d seconds=%.3f rate=%.1f errors=%d\n", count, elapsed.Seconds(), rate, errs)
}

// run starts workers goroutines of work until the deadline and returns the time taken.
func run(workers int, duration time.Duration, work func(deadline time.Time)) time.Duration {
	start := time.Now()
	deadline := start.Add(duration)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(deadline)
		}()
	}
	wg.Wait()
	return time.Since(start)
}

func grpcServer(args []string) error {
	flags := flag.NewFlagSet("grpc-server", flag.ExitOnError)
	listen := flags.String("listen", "127.0.0.1:9151", "address to serve on (h2c)")
	flags.Parse(args)
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	benchmark.StartServer(benchmark.ServerInfo{Type: "protobuf", Listener: listener})
	select {}
}

// grpcClient calls the benchmark service: unary RPCs, or request/response round trips on
// long-lived bidirectional streams (StreamingCall), -conns connections with -concurrency
// calls or streams in flight on each.
func grpcClient(args []string) error {
	flags := flag.NewFlagSet("grpc", flag.ExitOnError)
	addr := flags.String("addr", "127.0.0.1:8151", "address to call")
	mode := flags.String("mode", "unary", "unary or stream")
	conns := flags.Int("conns", 4, "HTTP/2 connections")
	concurrency := flags.Int("concurrency", 16, "calls or streams in flight per connection")
	duration := flags.Duration("duration", 10*time.Second, "how long to run")
	reqSize := flags.Int("req", 64, "request payload bytes")
	respSize := flags.Int("resp", 1024, "response payload bytes")
	flags.Parse(args)
	if *mode != "unary" && *mode != "stream" {
		return fmt.Errorf("-mode %q: unary or stream", *mode)
	}
	clients := make([]testgrpc.BenchmarkServiceClient, *conns)
	for i := range clients {
		conn, err := grpc.NewClient("passthrough:///"+*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		clients[i] = testgrpc.NewBenchmarkServiceClient(conn)
	}
	request := &testpb.SimpleRequest{
		ResponseType: testpb.PayloadType_COMPRESSABLE,
		ResponseSize: int32(*respSize),
		Payload:      benchmark.NewPayload(testpb.PayloadType_COMPRESSABLE, *reqSize),
	}
	var count, errs atomic.Int64
	var next atomic.Int64
	elapsed := run(*conns**concurrency, *duration, func(deadline time.Time) {
		client := clients[int(next.Add(1))%len(clients)]
		ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(5*time.Second))
		defer cancel()
		if *mode == "unary" {
			for time.Now().Before(deadline) {
				if _, err := client.UnaryCall(ctx, request); err != nil {
					errs.Add(1)
					continue
				}
				count.Add(1)
			}
			return
		}
		for time.Now().Before(deadline) {
			stream, err := client.StreamingCall(ctx)
			if err != nil {
				errs.Add(1)
				continue
			}
			for time.Now().Before(deadline) {
				if err = stream.Send(request); err == nil {
					_, err = stream.Recv()
				}
				if err != nil {
					errs.Add(1)
					break
				}
				count.Add(1)
			}
			stream.CloseSend()
		}
	})
	if count.Load() == 0 {
		return fmt.Errorf("no %s call completed (%d errors)", *mode, errs.Load())
	}
	report(count.Load(), elapsed, float64(count.Load())/elapsed.Seconds(), errs.Load())
	return nil
}

// handshakes opens new TLS 1.3 connections, each with a full handshake (X25519, no session
// cache, so never a resumption) and one HTTP/1.1 request with Connection: close, read to the end.
func handshakes(args []string) error {
	flags := flag.NewFlagSet("handshakes", flag.ExitOnError)
	addr := flags.String("addr", "127.0.0.1:8143", "HTTPS address")
	sni := flags.String("sni", "bench.test", "server name sent")
	concurrency := flags.Int("concurrency", 16, "connections open at once")
	duration := flags.Duration("duration", 10*time.Second, "how long to run")
	flags.Parse(args)
	config := &tls.Config{
		ServerName:         *sni,
		InsecureSkipVerify: true, // the bench's self-signed certificate; the handshake is the same
		MinVersion:         tls.VersionTLS13,
		MaxVersion:         tls.VersionTLS13,
		CurvePreferences:   []tls.CurveID{tls.X25519},
		NextProtos:         []string{"http/1.1"},
	}
	request := []byte("GET / HTTP/1.1\r\nHost: " + *sni + "\r\nConnection: close\r\n\r\n")
	var count, errs atomic.Int64
	var problem atomic.Value
	elapsed := run(*concurrency, *duration, func(deadline time.Time) {
		for time.Now().Before(deadline) {
			if err := handshake(*addr, config, request); err != nil {
				errs.Add(1)
				problem.Store(err.Error())
				continue
			}
			count.Add(1)
		}
	})
	if count.Load() == 0 {
		return fmt.Errorf("no connection completed (%d errors, last: %v)", errs.Load(), problem.Load())
	}
	if errs.Load() > 0 {
		fmt.Fprintf(os.Stderr, "handshakes: %d errors, last: %v\n", errs.Load(), problem.Load())
	}
	report(count.Load(), elapsed, float64(count.Load())/elapsed.Seconds(), errs.Load())
	return nil
}

func handshake(addr string, config *tls.Config, request []byte) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, config)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	state := conn.ConnectionState()
	if state.Version != tls.VersionTLS13 || state.DidResume {
		return fmt.Errorf("TLS version %x, resumed %v: want a new TLS 1.3 session", state.Version, state.DidResume)
	}
	if _, err := conn.Write(request); err != nil {
		return err
	}
	response, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	if _, err := io.Copy(io.Discard, response.Body); err != nil {
		return err
	}
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", response.StatusCode)
	}
	return nil
}

// streamSource writes 64 KiB chunks to every accepted connection until it fails; with -cert
// and -key it serves TLS 1.3.
func streamSource(args []string) error {
	flags := flag.NewFlagSet("stream-source", flag.ExitOnError)
	listen := flags.String("listen", "127.0.0.1:9120", "address to serve on")
	cert := flags.String("cert", "", "PEM certificate chain (TLS)")
	key := flags.String("key", "", "PEM private key (TLS)")
	flags.Parse(args)
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *cert != "" {
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			return err
		}
		listener = tls.NewListener(listener, &tls.Config{
			Certificates: []tls.Certificate{pair},
			MinVersion:   tls.VersionTLS13,
		})
	}
	chunk := make([]byte, 64<<10)
	for {
		conn, err := listener.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer conn.Close()
			for {
				if _, err := conn.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
}

// streamSink reads from -conns connections for -duration; with -sni the connections are TLS
// 1.3 with that server name. The rate is in Gbit/s.
func streamSink(args []string) error {
	flags := flag.NewFlagSet("stream-sink", flag.ExitOnError)
	addr := flags.String("addr", "127.0.0.1:8120", "address to read from")
	sni := flags.String("sni", "", "TLS with this server name")
	conns := flags.Int("conns", 4, "connections")
	duration := flags.Duration("duration", 10*time.Second, "how long to run")
	flags.Parse(args)
	var bytes, errs atomic.Int64
	var problem atomic.Value
	elapsed := run(*conns, *duration, func(deadline time.Time) {
		var conn net.Conn
		var err error
		if *sni != "" {
			conn, err = tls.Dial("tcp", *addr, &tls.Config{
				ServerName:         *sni,
				InsecureSkipVerify: true,
				MinVersion:         tls.VersionTLS13,
				CurvePreferences:   []tls.CurveID{tls.X25519},
			})
		} else {
			conn, err = net.Dial("tcp", *addr)
		}
		if err != nil {
			errs.Add(1)
			problem.Store(err.Error())
			return
		}
		defer conn.Close()
		conn.SetReadDeadline(deadline)
		buf := make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			bytes.Add(int64(n))
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					errs.Add(1)
					problem.Store(err.Error())
				}
				return
			}
		}
	})
	if bytes.Load() == 0 || errs.Load() > 0 {
		return fmt.Errorf("%d bytes read, %d errors, last: %v", bytes.Load(), errs.Load(), problem.Load())
	}
	report(bytes.Load(), elapsed, float64(bytes.Load())*8/elapsed.Seconds()/1e9, errs.Load())
	return nil
}

func udpEcho(args []string) error {
	flags := flag.NewFlagSet("udp-echo", flag.ExitOnError)
	listen := flags.String("listen", "127.0.0.1:9153", "address to serve on")
	flags.Parse(args)
	addr, err := net.ResolveUDPAddr("udp", *listen)
	if err != nil {
		return err
	}
	conn, err := net.ListenUDP("udp", addr)
	if err != nil {
		return err
	}
	buf := make([]byte, 65535)
	for {
		n, peer, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		conn.WriteToUDPAddrPort(buf[:n], peer)
	}
}

// udpClient keeps -window datagrams in flight on each of -clients sockets (each its own
// session in the proxy): every echo received sends the next one. A window not answered within
// 200 ms counts as lost (errors) and is sent again.
func udpClient(args []string) error {
	flags := flag.NewFlagSet("udp", flag.ExitOnError)
	addr := flags.String("addr", "127.0.0.1:8153", "address to send to")
	clients := flags.Int("clients", 16, "client sockets")
	window := flags.Int("window", 8, "datagrams in flight per socket")
	size := flags.Int("size", 64, "datagram bytes")
	duration := flags.Duration("duration", 10*time.Second, "how long to run")
	flags.Parse(args)
	target, err := net.ResolveUDPAddr("udp", *addr)
	if err != nil {
		return err
	}
	var count, errs atomic.Int64
	var problem atomic.Value
	elapsed := run(*clients, *duration, func(deadline time.Time) {
		conn, err := net.DialUDP("udp", nil, target)
		if err != nil {
			errs.Add(1)
			problem.Store(err.Error())
			return
		}
		defer conn.Close()
		datagram := make([]byte, *size)
		buf := make([]byte, 65535)
		send := func(n int) {
			for range n {
				if _, err := conn.Write(datagram); err != nil {
					problem.Store(err.Error())
				}
			}
		}
		send(*window)
		for time.Now().Before(deadline) {
			conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := conn.Read(buf); err != nil {
				errs.Add(int64(*window))
				problem.Store(err.Error())
				send(*window)
				continue
			}
			count.Add(1)
			send(1)
		}
	})
	if count.Load() == 0 {
		return fmt.Errorf("no datagram echoed (%d lost, last: %v)", errs.Load(), problem.Load())
	}
	report(count.Load(), elapsed, float64(count.Load())/elapsed.Seconds(), errs.Load())
	return nil
}
