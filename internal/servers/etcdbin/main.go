// Command etcdbin builds the etcd member binary that internal/servers runs (the lab
// module's cmd/dlock-etcd) into the user cache directory, unless it is there already,
// and prints its path. make deps runs it, so that the first test to start an etcd
// member does not wait for the build.
package main

import (
	"fmt"
	"os"

	"github.com/dlock-go/dlock/internal/servers"
)

func main() {
	path, err := servers.EtcdBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdbin:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
