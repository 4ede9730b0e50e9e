package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The test binary doubles as the server: with this variable set it runs CoreDNS's main.
const runServerEnv = "TURNA_COREDNS_TEST_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(runServerEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// startServer runs the trimmed CoreDNS with corefile and returns its process and output.
func startServer(t *testing.T, corefile string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-conf", path)
	cmd.Env = append(os.Environ(), runServerEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, &out
}

func query(addr, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Timeout: time.Second}
	r, _, err := c.Exchange(m, addr)
	return r, err
}

func TestServesHostsAndTemplateAnswersOnLoopback(t *testing.T) {
	port := freeUDPPort(t)
	_, out := startServer(t, fmt.Sprintf(`.:%d {
    bind 127.0.0.1
    errors
    hosts {
        10.244.1.1 echo.test
        fallthrough
    }
    template IN A example.test {
        answer "{{ .Name }} 60 IN A 10.244.1.2"
    }
    whoami
}
`, port))
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	var r *dns.Msg
	deadline := time.Now().Add(15 * time.Second)
	for {
		var err error
		if r, err = query(addr, "echo.test", dns.TypeA); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from %s: %v\n%s", addr, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(r.Answer) != 1 || !strings.Contains(r.Answer[0].String(), "10.244.1.1") {
		t.Fatalf("hosts answer: %v", r.Answer)
	}
	r, err := query(addr, "a.example.test", dns.TypeA)
	if err != nil || len(r.Answer) != 1 || !strings.Contains(r.Answer[0].String(), "10.244.1.2") {
		t.Fatalf("template answer: %v %v", r, err)
	}
	// Anything else falls to whoami, which answers locally: there is nothing to forward to.
	r, err = query(addr, "kubernetes.io", dns.TypeA)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Extra) == 0 {
		t.Fatalf("whoami answer: %v %v", r, err)
	}
}

func TestHasNoForwardPlugin(t *testing.T) {
	cmd, out := startServer(t, fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n    forward . 127.0.0.1:1\n}\n", freeUDPPort(t)))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(out.String(), "forward") {
			t.Fatalf("want a startup error naming forward, got %v:\n%s", err, out)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("a Corefile using forward was accepted:\n%s", out)
	}
}
