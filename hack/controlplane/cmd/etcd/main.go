// Command etcd is the etcd server, built from etcd's server module so that the project's tests run
// on a real etcd without a download site.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
