// CoreDNS (github.com/coredns/coredns, the version kubeadm deploys) with the plugins of the
// Corefile kubeadm writes (errors, health, ready, kubernetes, prometheus, forward, cache, loop,
// reload, loadbalance) and log: the kind node image's registry.k8s.io/coredns/coredns.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins; their order is dnsserver.Directives below.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func init() {
	// The order of CoreDNS's plugin.cfg for the plugins compiled in.
	dnsserver.Directives = []string{
		"reload",
		"ready",
		"health",
		"prometheus",
		"errors",
		"log",
		"loadbalance",
		"cache",
		"kubernetes",
		"loop",
		"forward",
	}
}

func main() {
	coremain.Run()
}
