// Package schemetest checks a URL scheme's opener the way every scheme registered
// with dlock must behave: a strict query (ErrInvalidURL naming what was wrong), no
// password in any error, bounds on every parameter, and no open that waits for
// ever. The root package's tests run it on every backend's scheme;
// the lab's on every peer's.
package schemetest

import (
	"context"
	"errors"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Example is a URL a scheme's opener accepts (no server answers at 127.0.0.1:1) and
// one query parameter it knows ("" for none).
type Example = struct{ URL, Param string }

// withQuery appends q to u's query.
func withQuery(u, q string) string {
	if strings.Contains(u, "?") {
		return u + "&" + q
	}
	return u + "?" + q
}

// Every runs check on every registered scheme, each in a subtest, with its example
// from examples (a scheme without one fails: add it).
func Every(t *testing.T, examples map[string]Example, check func(t *testing.T, scheme string, e Example)) {
	for _, scheme := range dlock.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			e, ok := examples[scheme]
			if !ok {
				t.Fatalf("no example URL for scheme %q: add one", scheme)
			}
			check(t, scheme, e)
		})
	}
}

// StrictQuery checks that a malformed query, a repeated parameter and an unknown
// one are ErrInvalidURL naming the parameter, from Declared and from Open alike
// (before any connection is tried).
func StrictQuery(t *testing.T, scheme string, s Example) {
	t.Helper()
	name, _, _ := strings.Cut(s.Param, "=")
	if name == "" {
		name = "x"
	}
	cases := map[string]string{
		withQuery(s.URL, "zz_bogus=1"):    `unknown query parameter "zz_bogus"`,
		withQuery(s.URL, "a=1;b=2"):       `malformed query parameter "a"`,
		withQuery(s.URL, name+"=%zz"):     `query parameter "` + name + `": malformed value`,
		withQuery(s.URL, "%zz=1"):         `malformed query parameter "%zz"`,
		withQuery(s.URL, "zz_bogus=1&&"):  `unknown query parameter "zz_bogus"`,
		withQuery(s.URL, "zz_bogus=%41"):  `unknown query parameter "zz_bogus"`,
		withQuery(s.URL, "zz%5Fbogus=%4"): `malformed value`,
	}
	if s.Param != "" {
		cases[withQuery(s.URL, s.Param+"&"+s.Param)] = `query parameter "` + name + `" given twice`
		// The valid URL with its parameter is accepted.
		if _, err := dlock.Declared(mustParse(t, withQuery(s.URL, s.Param))); err != nil {
			t.Errorf("Declared(%s): %v", withQuery(s.URL, s.Param), err)
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

// NoSecret checks that the errors of Open, Declared and Inspect show no password: a
// malformed URL, a bad parameter, a server that does not answer.
func NoSecret(t *testing.T, scheme string, s Example) {
	t.Helper()
	rest := strings.TrimPrefix(s.URL, scheme+"://")
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
		{secret + "@" + rest, false},                              // no scheme, no "//": the password is a path (FuzzParseURL)
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

// blackHole listens on a loopback port, accepts every connection and never says a
// word: a server that hangs. It returns its address.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// deadHost matches the unreachable hosts of the examples.
var deadHost = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

// OpenNeverHangs returns a check that Open and Inspect given a context without a
// deadline, against servers that accept connections and never answer, return an
// error within d, not never. The caller shortens dlock's open timeout below d (the
// root package's tests do: dlock.SetOpenTimeout).
func OpenNeverHangs(d time.Duration) func(t *testing.T, scheme string, s Example) {
	return func(t *testing.T, scheme string, s Example) {
		t.Helper()
		if scheme == "mem" {
			t.Skip("mem:// has no server")
		}
		u := deadHost.ReplaceAllStringFunc(s.URL, func(string) string { return blackHole(t) })
		for what, f := range map[string]func() error{
			"Open": func() error {
				l, err := dlock.Open(context.Background(), u)
				if l != nil {
					l.Close()
				}
				return err
			},
			"Inspect": func() error {
				_, err := dlock.Inspect(context.Background(), u)
				if errors.Is(err, errors.ErrUnsupported) {
					return errors.New("no inspection") // nothing to wait for
				}
				return err
			},
		} {
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- f() }()
			select {
			case err := <-done:
				// A peer's opener may not wait for its server at all.
				if err == nil && !strings.HasPrefix(scheme, "peer+") {
					t.Errorf("%s(%s) succeeded against servers that never answer", what, u)
				}
				if took := time.Since(start); took > d {
					t.Errorf("%s took %v, want at most %v", what, took, d)
				}
			case <-time.After(4 * d):
				t.Errorf("%s(%s) still waiting after %v with a context without deadline", what, u, 4*d)
			}
		}
	}
}

// Bound is what Bounds expects of one query parameter: values at its floor and
// ceiling accepted, values beyond refused with ErrInvalidURL naming the parameter
// and the bounds; or the reason it has none.
type Bound struct {
	With string   // other parameters the value needs
	OK   []string // values at the bounds
	Bad  []string // values beyond them
	Want string   // what the refusal says of the bounds
	None string   // or: why the parameter needs no bound
}

// TLSBounds are the bounds of the TLS parameters every scheme but mem takes.
var TLSBounds = map[string]Bound{
	"tls":             {None: "one of true, false, skip-verify"},
	"tls_ca":          {None: "a file name: a regular file of at most 1 MiB holding a certificate (TestFilesBounded)"},
	"tls_cert":        {None: "a file name: a regular file of at most 1 MiB holding a certificate"},
	"tls_key":         {None: "a file name: a regular file of at most 1 MiB holding the certificate's key"},
	"tls_server_name": {None: "a name the server's certificate must carry: the handshake refuses any other"},
}

// SessionTimeoutBounds are the bounds of a ZooKeeper session_timeout.
var SessionTimeoutBounds = Bound{OK: []string{"100ms", "24h"}, Bad: []string{"1ns", "99ms", "24h0m1s", "596h", "-1s"}, Want: "from 100ms to 24h0m0s"}

// Bounds returns a check that every query parameter of a scheme has a floor and a
// ceiling, or a stated reason it needs none (in bounds[scheme], or TLSBounds):
// Declared (and so Open) accepts the values at the bounds and refuses those beyond
// with ErrInvalidURL naming the parameter and the bounds.
func Bounds(bounds map[string]map[string]Bound) func(t *testing.T, scheme string, s Example) {
	return func(t *testing.T, scheme string, s Example) {
		t.Helper()
		ps, ok := bounds[scheme]
		if !ok {
			t.Fatalf("no bounds for scheme %q: add them", scheme)
		}
		for _, p := range knownParams(t, s.URL) {
			b, ok := ps[p]
			if !ok {
				b, ok = TLSBounds[p]
			}
			switch {
			case !ok:
				t.Errorf("parameter %q has neither bounds nor a reason for none", p)
				continue
			case b.None != "":
				continue
			}
			base := s.URL
			if b.With != "" {
				base = withQuery(base, b.With)
			}
			for _, v := range b.OK {
				u := withQuery(base, p+"="+url.QueryEscape(v))
				if _, err := dlock.Declared(mustParse(t, u)); err != nil {
					t.Errorf("Declared(%s): %v, want it accepted", u, err)
				}
			}
			for _, v := range b.Bad {
				u := withQuery(base, p+"="+url.QueryEscape(v))
				_, err := dlock.Declared(mustParse(t, u))
				if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), b.Want) {
					t.Errorf("Declared(%s) = %v, want ErrInvalidURL naming %s and saying %q", u, err, p, b.Want)
				}
			}
		}
	}
}

// knownParams returns the query parameters the scheme of URL u knows, as the
// refusal of an unknown one lists them.
func knownParams(t *testing.T, u string) []string {
	t.Helper()
	_, err := dlock.Declared(mustParse(t, withQuery(u, "zz_bogus=1")))
	if err == nil {
		t.Fatalf("%s accepts an unknown parameter", u)
	}
	_, list, ok := strings.Cut(err.Error(), " takes ")
	list, _, _ = strings.Cut(list, ")")
	if !ok || list == "none" {
		return nil
	}
	return strings.Split(list, ", ")
}
