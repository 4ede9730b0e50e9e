// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 at the version that
// k8s.io/kubernetes pins (same as etcd's own main.go).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
