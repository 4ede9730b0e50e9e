package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The end-to-end test runs the controller against a real kube-apiserver (e2e/scripts/apiserver.sh)
// with its pool on loopback (127.0.77.0/24 on lo), and backends in a network namespace it creates
// (10.250.77.2 and .3 behind a veth pair), since EndpointSlices may not point at loopback.
// It needs root (network namespaces, addresses on lo).

const (
	testPool      = "127.0.77.0/24"
	hostVethAddr  = "10.250.77.1/29"
	backendA      = "10.250.77.2"
	backendB      = "10.250.77.3"
	backendTCP    = 8080
	backendUDP    = 5353
	backendEnvVar = "TURNA_LB_TEST_BACKEND"
)

// TestBackendHelper is the backend process, run inside the test's network namespace by the
// end-to-end test: on each TCP connection it writes its name and then echoes; it answers each
// UDP datagram with its name and the datagram.
func TestBackendHelper(t *testing.T) {
	spec := os.Getenv(backendEnvVar)
	if spec == "" {
		return // not started as the helper: nothing to do
	}
	var listeners []io.Closer
	for _, entry := range strings.Split(spec, ",") {
		name, addr, _ := strings.Cut(entry, "=")
		ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(backendTCP)))
		if err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort(addr, strconv.Itoa(backendUDP)))
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, ln, pc)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					fmt.Fprintf(c, "%s\n", name)
					_, _ = io.Copy(c, c)
				}()
			}
		}()
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo([]byte(name+":"+string(buf[:n])), from)
			}
		}()
	}
	fmt.Println("ready")
	// Serve until the parent closes stdin (it exits or kills us).
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, l := range listeners {
		l.Close()
	}
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// netnsWithBackends creates a network namespace with a veth to the host and starts the backend
// helper in it; everything is removed at cleanup.
func netnsWithBackends(t *testing.T) {
	t.Helper()
	id := strconv.Itoa(os.Getpid() % 100000)
	ns, host, peer := "turna-lbt-"+id, "tlbh"+id, "tlbn"+id
	sh(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	sh(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
	sh(t, "ip", "link", "set", peer, "netns", ns)
	sh(t, "ip", "addr", "add", hostVethAddr, "dev", host)
	sh(t, "ip", "link", "set", host, "up")
	for _, a := range []string{backendA, backendB} {
		sh(t, "ip", "-n", ns, "addr", "add", a+"/29", "dev", peer)
	}
	sh(t, "ip", "-n", ns, "link", "set", peer, "up")
	sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	// Traffic to the backends must stay on this veth: check the route before sending anything.
	for _, a := range []string{backendA, backendB} {
		if out := sh(t, "ip", "route", "get", a); !strings.Contains(out, "dev "+host) {
			t.Fatalf("route to %s does not use %s: %s", a, host, out)
		}
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self, "-test.run=^TestBackendHelper$")
	cmd.Env = append(os.Environ(), backendEnvVar+"=a="+backendA+",b="+backendB)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("backend helper did not start: %q %v", line, err)
	}
}

// apiserver starts a private kube-apiserver and returns a client for it.
func apiserver(t *testing.T) kubernetes.Interface {
	t.Helper()
	scripts, err := filepath.Abs("../scripts")
	if err != nil {
		t.Fatal(err)
	}
	sh(t, filepath.Join(scripts, "build-tools.sh"))
	dir := t.TempDir()
	sh(t, filepath.Join(scripts, "apiserver.sh"), "start", dir, "--stop-with", strconv.Itoa(os.Getpid()))
	t.Cleanup(func() { _ = exec.Command(filepath.Join(scripts, "apiserver.sh"), "stop", dir).Run() })
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

func lbService(name string, mutate func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{
				{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(backendUDP)},
			},
		},
	}
	if mutate != nil {
		mutate(svc)
	}
	return svc
}

func endpointSlice(svc string, ready map[string]bool) *discoveryv1.EndpointSlice {
	web, dns := "web", "dns"
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	tcpPort, udpPort := int32(backendTCP), int32(backendUDP)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-x", Namespace: "default", Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "turna-lb-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: &web, Protocol: &tcp, Port: &tcpPort},
			{Name: &dns, Protocol: &udp, Port: &udpPort},
		},
	}
	for _, a := range []string{backendA, backendB} {
		r, ok := ready[a]
		if !ok {
			continue
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &r}})
	}
	return s
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ingressOf(ctx context.Context, c kubernetes.Interface, name string) ([]string, error) {
	svc, err := c.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, i := range svc.Status.LoadBalancer.Ingress {
		ips = append(ips, i.IP)
	}
	return ips, nil
}

func waitIngress(t *testing.T, ctx context.Context, c kubernetes.Interface, name string, want func([]string) bool) []string {
	t.Helper()
	var got []string
	eventually(t, "status of "+name, func() error {
		var err error
		if got, err = ingressOf(ctx, c, name); err != nil {
			return err
		}
		if !want(got) {
			return fmt.Errorf("ingress %v", got)
		}
		return nil
	})
	return got
}

// tcpHello connects to addr and returns the backend's first line (its name), after checking
// the connection echoes.
func tcpHello(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading greeting: %w", err)
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	if echo, err := r.ReadString('\n'); err != nil || echo != "ping\n" {
		return "", fmt.Errorf("echo %q: %v", echo, err)
	}
	return strings.TrimSpace(name), nil
}

func udpAsk(addr, msg string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

func onLoopback(t *testing.T, ip string) bool {
	t.Helper()
	return strings.Contains(sh(t, "ip", "-o", "addr", "show", "dev", "lo"), " "+ip+"/32 ")
}

func TestLoadBalancerServicesGetAnAddressAndForwardToReadyEndpoints(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it creates a network namespace and adds addresses to lo")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	netnsWithBackends(t)
	client := apiserver(t)

	pool, err := NewPool(netip.MustParsePrefix(testPool))
	if err != nil {
		t.Fatal(err)
	}
	lo, err := OpenInterface("lo", false)
	if err != nil {
		t.Fatal(err)
	}
	ctrlCtx, stopCtrl := context.WithCancel(ctx)
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() {
		done <- NewController(client, Config{Pool: pool, Interface: lo, AddressAnnotation: "metallb.io/loadBalancerIPs", Log: log}).Run(ctrlCtx)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopCtrl()
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		}
	}
	defer stop()

	svcs := client.CoreV1().Services("default")
	slices := client.DiscoveryV1().EndpointSlices("default")
	create := func(svc *corev1.Service) {
		t.Helper()
		if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inPool := func(ips []string) bool {
		return len(ips) == 1 && pool.Contains(netip.MustParseAddr(ips[0]))
	}

	// An address from the pool, forwarding TCP and UDP round-robin to both ready endpoints.
	create(lbService("web", nil))
	if _, err := slices.Create(ctx, endpointSlice("web", map[string]bool{backendA: true, backendB: true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := waitIngress(t, ctx, client, "web", inPool)[0]
	if !onLoopback(t, ip) {
		t.Fatalf("%s is not on lo", ip)
	}
	web := net.JoinHostPort(ip, "80")
	seen := map[string]int{}
	eventually(t, "tcp through "+web, func() error {
		name, err := tcpHello(web)
		if err == nil {
			seen[name]++
		}
		return err
	})
	for range 3 {
		name, err := tcpHello(web)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("connections did not reach both endpoints: %v", seen)
	}
	if reply, err := udpAsk(net.JoinHostPort(ip, "53"), "hello"); err != nil || !strings.HasSuffix(reply, ":hello") {
		t.Fatalf("udp reply %q: %v", reply, err)
	}

	// Only ready endpoints get traffic.
	notReady := endpointSlice("web", map[string]bool{backendA: false, backendB: true})
	eventually(t, "update slice", func() error {
		cur, err := slices.Get(ctx, notReady.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		notReady.ResourceVersion = cur.ResourceVersion
		_, err = slices.Update(ctx, notReady, metav1.UpdateOptions{})
		return err
	})
	eventually(t, "only b", func() error {
		for range 4 {
			if name, err := tcpHello(web); err != nil || name != "b" {
				return fmt.Errorf("got %q %v", name, err)
			}
		}
		return nil
	})

	// spec.loadBalancerIP and the annotation are honoured; a request outside the pool is not met.
	create(lbService("by-spec", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "127.0.77.200" }))
	waitIngress(t, ctx, client, "by-spec", func(ips []string) bool { return len(ips) == 1 && ips[0] == "127.0.77.200" })
	create(lbService("by-annotation", func(s *corev1.Service) {
		s.Annotations = map[string]string{"metallb.io/loadBalancerIPs": "127.0.77.201"}
	}))
	waitIngress(t, ctx, client, "by-annotation", func(ips []string) bool { return len(ips) == 1 && ips[0] == "127.0.77.201" })
	create(lbService("taken", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "127.0.77.200" }))
	create(lbService("outside", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "127.0.78.1" }))
	create(lbService("other-class", func(s *corev1.Service) { class := "example.com/other"; s.Spec.LoadBalancerClass = &class }))
	create(lbService("marker", nil)) // handled after the three above: their status is final by then
	waitIngress(t, ctx, client, "marker", inPool)
	for _, name := range []string{"taken", "outside", "other-class"} {
		if ips, err := ingressOf(ctx, client, name); err != nil || len(ips) != 0 {
			t.Fatalf("%s: ingress %v %v, want none", name, ips, err)
		}
	}

	// Changing the type releases the address: status cleared, address gone, port closed.
	eventually(t, "type change", func() error {
		svc, err := svcs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
		_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
		return err
	})
	waitIngress(t, ctx, client, "web", func(ips []string) bool { return len(ips) == 0 })
	eventually(t, "address removed", func() error {
		if onLoopback(t, ip) {
			return fmt.Errorf("%s still on lo", ip)
		}
		return nil
	})
	if _, err := tcpHello(web); err == nil {
		t.Fatal("released address still forwards")
	}

	// Deleting releases too, and the Service that waited for the address gets it.
	if err := svcs.Delete(ctx, "by-spec", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIngress(t, ctx, client, "taken", func(ips []string) bool { return len(ips) == 1 && ips[0] == "127.0.77.200" })

	// Stopping the controller removes every address it added.
	held := []string{"127.0.77.200", "127.0.77.201"}
	stop()
	for _, a := range held {
		if onLoopback(t, a) {
			t.Errorf("%s still on lo after the controller stopped", a)
		}
	}
}
