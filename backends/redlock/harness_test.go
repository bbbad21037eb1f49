package redlock_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/redlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

// TestMain turns the binary into a lock holder when the fault suite starts it as one,
// stops every server the tests started, and then checks that no goroutine is left.
func TestMain(m *testing.M) {
	conformance.ChildMain()
	code := m.Run()
	os.Exit(servertest.Finish(code))
}

const (
	masters      = 5
	startTimeout = 2 * time.Minute
)

// ctxFor returns a context that ends after d or when t ends.
var ctxFor = locktest.Ctx

// privateMasters starts n independent masters for t alone; the first one's wall
// clock can be shifted (ShiftClock) when clock is set.
func privateMasters(t testing.TB, n int, clock bool) []*servers.Redis {
	if !clock {
		return servertest.RedisMasters(t, n)
	}
	rs := make([]*servers.Redis, n)
	for i := range rs {
		rs[i] = servertest.NewRedis(t, servers.RedisOptions{FakeTimeOffset: "+0"})
	}
	return rs
}

func addrs(rs []*servers.Redis) []string {
	a := make([]string, len(rs))
	for i, r := range rs {
		a[i] = r.Addr()
	}
	return a
}

// clients returns one go-redis client per master, closed when t ends.
func clients(t testing.TB, rs []*servers.Redis) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(rs))
	for i, r := range rs {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

// newLocker returns a Locker over rs with its own clients.
func newLocker(t testing.TB, rs []*servers.Redis, opts ...redlock.Option) dlock.Locker {
	l := redlock.New(clients(t, rs), opts...)
	t.Cleanup(func() { l.Close() })
	return l
}

// url is the redlock:// URL of rs.
func url(rs []*servers.Redis) string {
	return redlock.Scheme + "://" + strings.Join(addrs(rs), ",")
}

// holders counts the masters whose key holds a value, and returns the values.
func holders(t testing.TB, rs []*servers.Redis, key string) (n int, values []string) {
	t.Helper()
	for _, r := range rs {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
		v, err := c.Get(ctxFor(t, 5*time.Second), key).Result()
		c.Close()
		switch err {
		case nil:
			n++
			values = append(values, v)
		case redis.Nil:
		default:
			values = append(values, "error: "+err.Error())
		}
	}
	return n, values
}

// harness gives the suite clients of New over 5 masters, each client with its own
// go-redis clients (its own connections), as separate processes would have; or, with
// a URL, clients opened from it.
type harness struct {
	rs   []*servers.Redis
	name string
	url  string
}

func (h *harness) NewLocker(t testing.TB) dlock.Locker {
	if h.url != "" {
		return servertest.Open(t, h.url)
	}
	return redlock.New(clients(t, h.rs))
}

func (h *harness) Name() string {
	if h.name != "" {
		return h.name
	}
	return "redlock"
}

func (h *harness) Capabilities() spec.Capabilities {
	if h.url != "" {
		return conformance.MustDeclare(h.url)
	}
	return conformance.MustDeclare(url(h.rs))
}

// DeleteKey deletes the lock on every master, as an operator would; it must have
// existed on a majority.
func (h *harness) DeleteKey(t testing.TB, key string) {
	n := 0
	for _, r := range h.rs {
		s, err := r.Do(ctxFor(t, 10*time.Second), "DEL", key)
		if err != nil {
			t.Fatalf("DEL %q on %s: %v", key, r.Addr(), err)
		}
		if s == "1" {
			n++
		}
	}
	if n < len(h.rs)/2+1 {
		t.Fatalf("DEL %q deleted it on %d of %d masters: it was not held by a majority", key, n, len(h.rs))
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, &harness{rs: privateMasters(t, masters, false)})
}

// tlsMasters starts n masters that speak TLS only and want client certificates,
// each with the ACL user locker:secretPassword (redisops.LockUserACL), and returns
// them with the redlock:// URL of that user (CA, client certificate and key, server
// name "localhost").
func tlsMasters(t testing.TB, n int) ([]*servers.Redis, string) {
	pki := servertest.PKI(t)
	rs := make([]*servers.Redis, n)
	for i := range rs {
		rs[i] = servertest.SecureRedis(t, pki, "adm1n-pw", "locker", secretPassword, redisops.LockUserACL)
	}
	u := fmt.Sprintf("redlock://locker:%s@%s?%s", secretPassword, strings.Join(addrs(rs), ","), pki.URLQuery())
	return rs, u
}

// secretPassword is the lock user's password on the TLS masters.
const secretPassword = "S3CRET-redlock-pw"

// TestConformanceTLS runs the suite on Lockers opened from a redlock:// URL with TLS
// (CA, client certificate, server name) and an ACL user of least privilege, over 3
// masters that require all of them.
func TestConformanceTLS(t *testing.T) {
	rs, u := tlsMasters(t, 3)
	conformance.Run(t, &harness{rs: rs, name: "redlock (TLS, ACL user)", url: u})
}
