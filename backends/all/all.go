// Package all registers every backend's URL schemes with dlock.Open by importing
// them: a program that opens locks by URL and wants every scheme imports it for its
// side effect.
//
//	import _ "github.com/dlock-go/dlock/backends/all" // mem, redis, rediss, redis+setnx, redlock, mysql, mysql+getlock, postgres, postgresql, postgres+advisory, zk, etcd
//
// A program that uses one backend imports that backend's package instead: it links
// only that backend's client.
package all

import (
	_ "github.com/dlock-go/dlock/backends/etcdlock"
	_ "github.com/dlock-go/dlock/backends/memlock"
	_ "github.com/dlock-go/dlock/backends/mysqllock"
	_ "github.com/dlock-go/dlock/backends/pglock"
	_ "github.com/dlock-go/dlock/backends/redislock"
	_ "github.com/dlock-go/dlock/backends/redlock"
	_ "github.com/dlock-go/dlock/backends/zklock"
)
