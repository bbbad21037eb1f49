package pgadvisorypeer_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
	"github.com/dlock-go/dlock/lab/peers/pgadvisorypeer"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) { peertest.Main(m) }

// ctxFor returns a context that ends after d or when t ends.
var ctxFor = locktest.Ctx

// harness gives the suite clients of a fresh database on the shared PostgreSQL,
// each with its own pool through its own proxy, so that one client can vanish.
type harness struct {
	server *servers.Postgres
	pgURL  *url.URL      // postgres:// URL of the database, as the superuser
	admin  *pgxpool.Pool // the harness's own look at pg_locks

	proxies servertest.Links[*servers.Proxy]
}

func newHarness(t *testing.T) *harness {
	p := servertest.Postgres(t)
	u, err := url.Parse(p.URL(servertest.PostgresDatabase(t, p)))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgxpool.New(ctxFor(t, 10*time.Second), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return &harness{server: p, pgURL: u, admin: admin}
}

// peerURL is the peer's URL of the harness's database through addr.
func (h *harness) peerURL(addr string) string {
	u := *h.pgURL
	u.Scheme, u.Host, u.RawQuery = pgadvisorypeer.Scheme, addr, ""
	return u.String()
}

// NewLocker opens a client by the peer's URL (a pool of its own, which its Close
// closes) that reaches the server through a proxy of its own.
func (h *harness) NewLocker(t testing.TB) dlock.Locker {
	p := servertest.Proxy(t, h.server.Addr())
	l := servertest.Open(t, h.peerURL(p.Addr()))
	h.proxies.Add(t, l, p)
	return l
}

// Capabilities: locks last as long as their session. Weak: a cut connection frees
// its lock at once, while its client, told nothing, goes on (DeadlockFreedom: freed
// before the holder's lease ended; DoneAndErr: Done stays open); a key with a NUL
// byte fails (KeyIsolation, InputValidation); a cancelled wait may be granted the
// lock after Acquire returned (Cancellation).
func (h *harness) Capabilities() spec.Capabilities {
	return conformance.MustDeclare(h.peerURL(h.server.Addr()))
}

func (h *harness) Name() string { return "peer+pgadvisory" }

var _ conformance.QueueInspector = (*harness)(nil) // peer+pgadvisory declares FIFO

// lockRows is the pg_locks condition of key's ($1) advisory lock in this database:
// the bigint hashtext(key) is classid (high half), objid (low half) and objsubid 1.
const lockRows = `locktype = 'advisory' AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid::bigint = (hashtext($1)::bigint >> 32) & 4294967295 AND objid::bigint = hashtext($1)::bigint & 4294967295`

// Waiting counts the sessions waiting for key's advisory lock.
func (h *harness) Waiting(t testing.TB, key string) int {
	var n int
	if err := h.admin.QueryRow(ctxFor(t, 10*time.Second), "SELECT count(*) FROM pg_locks WHERE NOT granted AND "+lockRows, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Vanish cuts the client's connections, as a crash or a network cut does.
func (h *harness) Vanish(t testing.TB, l dlock.Locker) { h.proxies.Of(t, l).Cut() }

func TestConformance(t *testing.T) {
	conformance.Run(t, newHarness(t))
}
