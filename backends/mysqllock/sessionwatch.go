package mysqllock

import (
	"database/sql"
	"net"
	"reflect"
	"syscall"
	"unsafe"
)

// A GET_LOCK lease lasts as long as its session, and the server ends a session by
// closing its connection: on KILL, on shutdown, and — the kernel does it — when the
// server process dies. So a held lease watches its connection's socket between its
// statements (backends/internal/sockwatch) and checks the session the moment the
// socket becomes readable: the peer closed it, reset it, or sent a packet nobody
// asked for (the server's "shutdown in progress" error before it closes).
//
// The socket is reached through database/sql's Conn.Raw: the MySQL driver keeps its
// TCP connection in an unexported field (rawConn, the socket under TLS too), read
// here by reflection. Where that fails (another driver, a field renamed by a newer
// version of go-sql-driver/mysql: TestGetLockServerRestart and
// TestGetLockKilledConnection fail then),
// the lease falls back to its checks alone.

// socketOf returns the socket under conn's driver connection, or nil.
func socketOf(conn *sql.Conn) net.Conn {
	var nc net.Conn
	_ = conn.Raw(func(dc any) error {
		v := reflect.ValueOf(dc)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			return nil
		}
		netConnType := reflect.TypeFor[net.Conn]()
		for _, name := range []string{"rawConn", "netConn"} {
			f := v.Elem().FieldByName(name)
			if !f.IsValid() || f.Type() != netConnType || !f.CanAddr() {
				continue
			}
			if c, _ := reflect.NewAt(netConnType, unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(net.Conn); c != nil {
				nc = c
				return nil
			}
		}
		return nil
	})
	if _, ok := nc.(syscall.Conn); !ok {
		return nil
	}
	return nc
}
