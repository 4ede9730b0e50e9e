// Command turna-lb is the LoadBalancer controller of Turna's local e2e cluster: Services of type
// LoadBalancer get an address from a pool, put on a host interface (the cluster bridge), and
// TCP and UDP to that address and a Service port are forwarded to the Service's ready endpoints,
// taken from its EndpointSlices (the cluster has no kube-proxy). Gateways thus get reachable
// status addresses, as with a cloud load balancer or MetalLB.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if err := run(); err != nil {
		slog.Error("turna-lb failed", "error", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster (default: $KUBECONFIG, else in-cluster)")
	pool := flag.String("pool", "10.244.255.0/24", "prefix load-balancer addresses are assigned from")
	iface := flag.String("interface", "turna0", "interface the assigned addresses are added to")
	create := flag.Bool("create-interface", false, "create the interface as an empty bridge when it does not exist")
	annotation := flag.String("address-annotation", "metallb.io/loadBalancerIPs", "Service annotation listing requested addresses (comma-separated); empty disables it")
	verbose := flag.Bool("v", false, "debug logging (each connection)")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	prefix, err := netip.ParsePrefix(*pool)
	if err != nil {
		return fmt.Errorf("--pool: %w", err)
	}
	p, err := NewPool(prefix)
	if err != nil {
		return err
	}
	link, err := OpenInterface(*iface, *create)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "turna-lb"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("starting", "pool", prefix, "interface", *iface, "address_annotation", *annotation)
	return NewController(client, Config{Pool: p, Interface: link, AddressAnnotation: *annotation, Log: log}).Run(ctx)
}
