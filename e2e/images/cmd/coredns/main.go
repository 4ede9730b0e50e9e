// Command coredns is CoreDNS with only the plugins a test cluster's DNS server needs, for the
// registry.k8s.io/coredns/coredns image. The forward plugin is left out on purpose: pods have no
// route off the machine, and a server that cannot forward cannot leak queries.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins; their order is dnsserver.Directives below.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/file"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/template"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func init() {
	// The order of CoreDNS's plugin.cfg for the plugins compiled in.
	dnsserver.Directives = []string{
		"reload",
		"bind",
		"ready",
		"health",
		"errors",
		"log",
		"cache",
		"template",
		"hosts",
		"file",
		"loop",
		"whoami",
	}
}

func main() {
	coremain.Run()
}
