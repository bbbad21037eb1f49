package dlock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9/logging"

	"github.com/dlock-go/dlock"
	_ "github.com/dlock-go/dlock/backends/etcdlock"
	_ "github.com/dlock-go/dlock/backends/memlock"
	_ "github.com/dlock-go/dlock/backends/mysqllock"
	_ "github.com/dlock-go/dlock/backends/redislock"
	_ "github.com/dlock-go/dlock/backends/redlock"
	_ "github.com/dlock-go/dlock/backends/zklock"
	_ "github.com/dlock-go/dlock/peers/bsmpeer"
	_ "github.com/dlock-go/dlock/peers/etcdpeer"
	_ "github.com/dlock-go/dlock/peers/getlockpeer"
	_ "github.com/dlock-go/dlock/peers/redsyncpeer"
	_ "github.com/dlock-go/dlock/peers/zkpeer"
)

func init() {
	// The backends say why a server did not answer; go-redis's own log lines (every
	// failed dial) would only repeat it.
	logging.Disable()
}

// schemeURLs gives, for every scheme the module registers, a URL its opener accepts
// (no server answers at 127.0.0.1:1) and one query parameter it knows ("" for none).
var schemeURLs = map[string]struct{ url, param string }{
	"mem":           {"mem://", ""},
	"etcd":          {"etcd://127.0.0.1:1/p", "tls_server_name=x"},
	"mysql":         {"mysql://u@127.0.0.1:1/db", "table=t"},
	"mysql+getlock": {"mysql+getlock://u@127.0.0.1:1/db", "wait_timeout=5"},
	"redis":         {"redis://127.0.0.1:1", "wait_replicas=1"},
	"rediss":        {"rediss://127.0.0.1:1", "tls_server_name=x"},
	"redis+setnx":   {"redis+setnx://127.0.0.1:1?variant=expire", "cluster=false"},
	"redlock":       {"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "node_timeout=10ms"},
	"zk":            {"zk://127.0.0.1:1/r", "session_timeout=5s"},
	"peer+bsm":      {"peer+bsm://127.0.0.1:1", ""},
	"peer+etcd":     {"peer+etcd://127.0.0.1:1", "session_ttl=5"},
	"peer+getlock":  {"peer+getlock://u@127.0.0.1:1/db", ""},
	"peer+redsync":  {"peer+redsync://127.0.0.1:1", ""},
	"peer+zk":       {"peer+zk://127.0.0.1:1", "session_timeout=5s"},
}

// withQuery appends q to u's query.
func withQuery(u, q string) string {
	if strings.Contains(u, "?") {
		return u + "&" + q
	}
	return u + "?" + q
}

// TestStrictQueryEveryScheme: for every registered scheme, a malformed query, a
// repeated parameter and an unknown one are ErrInvalidURL naming the parameter, from
// Declared and from Open alike (before any connection is tried).
func TestStrictQueryEveryScheme(t *testing.T) {
	for _, scheme := range dlock.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			s, ok := schemeURLs[scheme]
			if !ok {
				t.Fatalf("no test URL for scheme %q: add one to schemeURLs", scheme)
			}
			name, _, _ := strings.Cut(s.param, "=")
			if name == "" {
				name = "x"
			}
			cases := map[string]string{
				withQuery(s.url, "zz_bogus=1"):    `unknown query parameter "zz_bogus"`,
				withQuery(s.url, "a=1;b=2"):       `malformed query parameter "a"`,
				withQuery(s.url, name+"=%zz"):     `query parameter "` + name + `": malformed value`,
				withQuery(s.url, "%zz=1"):         `malformed query parameter "%zz"`,
				withQuery(s.url, "zz_bogus=1&&"):  `unknown query parameter "zz_bogus"`,
				withQuery(s.url, "zz_bogus=%41"):  `unknown query parameter "zz_bogus"`,
				withQuery(s.url, "zz%5Fbogus=%4"): `malformed value`,
			}
			if s.param != "" {
				cases[withQuery(s.url, s.param+"&"+s.param)] = `query parameter "` + name + `" given twice`
				// The valid URL with its parameter is accepted.
				if _, err := dlock.Declared(mustParse(t, withQuery(s.url, s.param))); err != nil {
					t.Errorf("Declared(%s): %v", withQuery(s.url, s.param), err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for u, want := range cases {
				_, derr := dlock.Declared(mustParse(t, u))
				l, oerr := dlock.Open(ctx, u)
				if l != nil {
					l.Close()
				}
				for what, err := range map[string]error{"Declared": derr, "Open": oerr} {
					if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), want) {
						t.Errorf("%s(%s) = %v, want ErrInvalidURL saying %s", what, u, err, want)
					}
				}
			}
		})
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// secret is the password of TestNoSecretInErrors: no error may contain it.
const secret = "S3CRET-pass"

// TestNoSecretInErrors: for every registered scheme, the errors of Open, Declared
// and Inspect show no password: a malformed URL, a bad parameter, a server that does
// not answer.
func TestNoSecretInErrors(t *testing.T) {
	for _, scheme := range dlock.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			s, ok := schemeURLs[scheme]
			if !ok {
				t.Fatalf("no test URL for scheme %q: add one to schemeURLs", scheme)
			}
			rest := strings.TrimPrefix(s.url, scheme+"://")
			if at := strings.Index(rest, "@"); at >= 0 {
				rest = rest[at+1:]
			}
			withUser := func(userinfo string) string { return scheme + "://" + userinfo + "@" + rest }
			urls := []struct {
				url        string
				wellFormed bool
			}{
				{withUser("u:" + secret), true},                           // unreachable (or refused: mem takes no user)
				{withUser("u:" + secret + ":" + secret), false},           // a ':' in the password needs no escape (not dialled)
				{withUser("u:" + secret + "%zz"), false},                  // malformed escape in the password
				{withUser("u:" + secret + "/x"), false},                   // an unescaped '/' cuts the authority short
				{withUser("u:" + secret + "#x"), false},                   // an unescaped '#'
				{withQuery(withUser("u:"+secret), "zz_bogus=1"), false},   // unknown parameter
				{withQuery(withUser("u:"+secret), "a=1;b=2"), false},      // malformed query
				{"//u:" + secret + "@" + rest, false},                     // no scheme
				{withQuery(withUser("u:"+secret), "tls_ca=/nope"), false}, // a TLS file that does not exist
			}
			for _, c := range urls {
				u := c.url
				var err, ierr error
				switch {
				case c.wellFormed: // dialled: nothing answers at 127.0.0.1:1
					err, ierr = openAndInspect(u, 500*time.Millisecond)
				case !strings.Contains(u, ":"+secret+":"): // refused before any connection is tried
					err, ierr = openAndInspect(u, 5*time.Second)
				}
				var derr error
				if pu, perr := dlock.ParseURL(u); perr != nil {
					derr = perr
				} else {
					_, derr = dlock.Declared(pu)
				}
				for what, e := range map[string]error{"Open": err, "Inspect": ierr, "Declared": derr} {
					if e != nil && strings.Contains(e.Error(), strings.TrimPrefix(secret, "S3")) {
						t.Errorf("%s shows the password: %v", what, e)
					}
				}
				// A peer's opener may not dial at all; the ':' URL is only declared.
				if err == nil && !strings.Contains(u, ":"+secret+":") && (!c.wellFormed || !strings.HasPrefix(scheme, "peer+")) {
					t.Errorf("Open(%s) succeeded", strings.ReplaceAll(u, secret, "…"))
				}
			}
		})
	}
}

// openAndInspect runs dlock.Open (closing what it opens) and dlock.Inspect on u,
// within d, and returns their errors.
func openAndInspect(u string, d time.Duration) (openErr, inspectErr error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	l, openErr := dlock.Open(ctx, u)
	if l != nil {
		l.Close()
	}
	_, inspectErr = dlock.Inspect(ctx, u)
	return openErr, inspectErr
}
