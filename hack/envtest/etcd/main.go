// etcd from the pinned go.etcd.io/etcd/server/v3 module (see go.mod); a module of its own so that
// its dependency versions do not move kube-apiserver's.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
