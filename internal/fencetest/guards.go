package fencetest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver, for sqlfence on PostgreSQL
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/etcdfence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/fence/sqlfence"
	"github.com/dlock-go/dlock/internal/servers"
)

// Guards returns every fencing guard on a real store, for a harness's
// conformance.FenceGuarder: fence.Handler in front of a real net/http server on
// loopback (fence.Memory behind it), fence.Dir in a temporary directory, redisfence
// on the shared redis-server, sqlfence on a fresh database of the shared MariaDB and
// on one of the shared PostgreSQL (through pgx's database/sql driver), etcdfence on the shared etcd (each under names of its own). A guard whose server
// is not installed is left out (logged), unless DLOCK_REQUIRE_SERVERS=1, when t
// fails; any other failure to start one fails t. Everything ends with t.
func Guards(t testing.TB) []conformance.FenceGuard {
	t.Helper()
	ctx := Ctx(t, servers.DefaultStartTimeout)
	var out []conformance.FenceGuard
	add := func(name string, g fence.Guard, err error) {
		t.Helper()
		switch {
		case err == nil:
			out = append(out, conformance.FenceGuard{Name: name, Guard: g})
		case servers.IsMissing(err) && !servers.RequireServers():
			t.Logf("the %s guard is left out: %v", name, err)
		default:
			t.Fatalf("the %s guard: %v", name, err)
		}
	}
	add("fence.Handler", NewHTTPGuard(t, fence.NewMemory(), nil), nil)
	d, err := fence.NewDir(t.TempDir())
	add("fence.Dir", d, err)
	g, err := redisGuard(ctx, t)
	add("redisfence", g, err)
	g, err = sqlGuard(ctx, t)
	add("sqlfence on MariaDB", g, err)
	g, err = pgGuard(ctx, t)
	add("sqlfence on PostgreSQL", g, err)
	g, err = etcdGuard(ctx, t)
	add("etcdfence", g, err)
	return out
}

func redisGuard(ctx context.Context, t testing.TB) (fence.Guard, error) {
	r, err := servers.SharedRedis(ctx)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { c.Close() })
	return redisfence.New(c), nil
}

func sqlGuard(ctx context.Context, t testing.TB) (fence.Guard, error) {
	m, err := servers.SharedMySQL(ctx)
	if err != nil {
		return nil, err
	}
	dsn, err := m.NewDatabase(ctx)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = m.DropDatabase(context.Background(), dsn) })
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { db.Close() })
	g, err := sqlfence.New(db, sqlfence.MySQL)
	if err != nil {
		return nil, err
	}
	return g, g.CreateTable(ctx)
}

func pgGuard(ctx context.Context, t testing.TB) (fence.Guard, error) {
	p, err := servers.SharedPostgres(ctx)
	if err != nil {
		return nil, err
	}
	name, err := p.NewDatabase(ctx)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = p.DropDatabase(context.Background(), name) })
	db, err := sql.Open("pgx", p.URL(name))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { db.Close() })
	g, err := sqlfence.New(db, sqlfence.PostgreSQL)
	if err != nil {
		return nil, err
	}
	return g, g.CreateTable(ctx)
}

func etcdGuard(ctx context.Context, t testing.TB) (fence.Guard, error) {
	e, err := servers.SharedEtcd(ctx)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cli.Close() })
	return etcdfence.New(cli, etcdfence.WithPrefix("/fencetest-"+fence.NewWriter()[:12])), nil
}

// HTTPGuard is the HTTP guard seen as a fence.Guard: Check is a PUT to a real
// net/http server on loopback whose handler is fence.Handler in front of the guard
// it was made with (the resource is the path without its first slash), sent with
// fence.Transport and read back with fence.StaleResponse.
type HTTPGuard struct{ srv *httptest.Server }

// NewHTTPGuard serves next (204 No Content when nil) behind fence.Handler with g,
// on 127.0.0.1 until t ends. next must answer 204 to a write it takes.
func NewHTTPGuard(t testing.TB, g fence.Guard, next http.Handler) *HTTPGuard {
	if next == nil {
		next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	}
	srv := httptest.NewServer(fence.Handler(g, HTTPResource, next))
	t.Cleanup(srv.Close)
	return &HTTPGuard{srv: srv}
}

// Server is the HTTP server.
func (h *HTTPGuard) Server() *httptest.Server { return h.srv }

// HTTPResource is the resource of a request to an HTTPGuard's server.
func HTTPResource(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/") }

// Check sends one guarded PUT for resource, without a body.
func (h *HTTPGuard) Check(ctx context.Context, resource string, token uint64, writer string) error {
	return h.Put(ctx, resource, token, writer, "")
}

// Put sends one guarded PUT of body for resource: nil for 204 No Content, the
// refusal (fence.ErrStale) for the guard's 409, an error with the status otherwise.
func (h *HTTPGuard) Put(ctx context.Context, resource string, token uint64, writer, body string) error {
	c := &http.Client{Transport: &fence.Transport{Base: h.srv.Client().Transport, Token: token, Writer: writer}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, h.srv.URL+"/"+url.PathEscape(resource), strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := fence.StaleResponse(resp); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	return nil
}
