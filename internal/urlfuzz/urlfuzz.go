// Package urlfuzz holds what the fuzz targets of dlock's URL parsers share: seed
// URLs, a password that no error may show, and the checks every parser's error must
// pass. It is for tests only.
package urlfuzz

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
)

// Password is the password a fuzzed URL with user information is given: no error
// may contain it.
const Password = "Zq9S3CRETxK"

// Parse parses raw as url.Parse does (false when it cannot) and, when the URL has
// user information, replaces its password with Password.
func Parse(raw string) (*url.URL, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, false
	}
	if u.User != nil {
		u.User = url.UserPassword(u.User.Username(), Password)
	}
	return u, true
}

// WithScheme returns raw with its scheme (whatever precedes the first "://")
// replaced by scheme, or scheme + "://" + raw when it has none: the fuzzer varies
// the rest of a URL of a scheme a parser takes.
func WithScheme(scheme, raw string) string {
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		return scheme + "://" + rest
	}
	return scheme + "://" + raw
}

// Marker is the part of Password that no error may contain (unless the fuzzed
// input has it elsewhere too).
const Marker = "S3CRET"

// CheckErr fails t unless err is nil or an error wrapping dlock.ErrInvalidURL
// (what a parser that contacts no server may return) that shows no password. raw
// is the fuzzed input: one that has Marker itself proves nothing.
func CheckErr(t *testing.T, raw string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if !errors.Is(err, dlock.ErrInvalidURL) {
		t.Fatalf("a parser's error does not wrap ErrInvalidURL: %v", err)
	}
	if strings.Contains(err.Error(), Marker) && !strings.Contains(raw, Marker) {
		t.Fatalf("the error shows the password: %v", err)
	}
}

// Target is one URL parser under fuzzing.
type Target struct {
	// Schemes are the schemes the parser takes: each input is tried with each.
	Schemes []string
	// Parse runs the parser on u and checks what it accepted (failing t); it
	// returns the parser's error.
	Parse func(t *testing.T, u *url.URL) error
	// Declare is the scheme's declaration (dlock.Scheme.Declare's error), which
	// must accept exactly what Parse does; nil for none.
	Declare func(u *url.URL) error
}

// Fuzz runs the fuzz target of parsers: it adds Seeds to f's corpus, and for each
// input and scheme parses the input under that scheme (url.Parse, Password put in),
// runs the parser, checks its error (CheckErr) and that the declaration agrees.
func Fuzz(f *testing.F, parsers ...Target) {
	for _, s := range Seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, p := range parsers {
			for _, scheme := range p.Schemes {
				u, ok := Parse(WithScheme(scheme, raw))
				if !ok {
					continue
				}
				err := p.Parse(t, u)
				CheckErr(t, raw, err)
				if p.Declare == nil {
					continue
				}
				if derr := p.Declare(u); (derr == nil) != (err == nil) {
					t.Fatalf("%s: the parser says %v, the declaration %v", u.Redacted(), err, derr)
				}
			}
		}
	})
}

// Declaration adapts a scheme's declaration to Target.Declare.
func Declaration[C any](declare func(*url.URL) (C, error)) func(*url.URL) error {
	return func(u *url.URL) error {
		_, err := declare(u)
		return err
	}
}

// CheckHosts fails t unless every host of an accepted URL u is host:port.
func CheckHosts(t *testing.T, u *url.URL, hosts []string) {
	t.Helper()
	if len(hosts) == 0 {
		t.Fatalf("%s: no host", u.Redacted())
	}
	for _, h := range hosts {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			t.Fatalf("%s: accepted host %q", u.Redacted(), h)
		}
	}
}

// CheckDSN fails t unless cfg, the driver configuration a MySQL URL u was
// accepted with, reads back the same (user, password, address, database) from its
// own DSN: nothing in the URL confuses the driver.
func CheckDSN(t *testing.T, u *url.URL, cfg *mysql.Config) {
	t.Helper()
	back, err := mysql.ParseDSN(cfg.FormatDSN())
	if err != nil || back.User != cfg.User || back.Passwd != cfg.Passwd || back.Addr != cfg.Addr || back.DBName != cfg.DBName {
		t.Fatalf("%s: the driver configuration does not read back: %v", u.Redacted(), err)
	}
}

// Seeds are URLs of every scheme, odd ones included, that start each URL parser's
// corpus (besides its own).
var Seeds = []string{
	"redis://127.0.0.1:6379", "rediss://u:p@h:1/2?tls_server_name=x", "redis://h1:1,h2:2?cluster=false",
	"redis://h:1?sentinel_master=m&wait_replicas=1&wait_timeout=1ms", "redis+setnx://h:1?variant=getset",
	"redlock://a:1,b:2,c:3?node_timeout=1ms&drift_factor=0.5&drift_fixed=1s", "redlock://a:1,a:1",
	"mysql://u:p@h:3306/db?table=t&fifo=true", "mysql+getlock://u@h/db?wait_timeout=31536000&check_interval=1h&max_conns=100000",
	"zk://u:p@h1:2181,h2:2181/r/s?session_timeout=24h", "zk://h:1/.elections", "zk://h:1/zookeeper/x",
	"etcd://h:2379/p/!primitives", "etcd://u:p@h:1,h:2/p?tls=skip-verify", "mem://", "mem://?x=1",
	"peer+etcd://h:1/p?session_ttl=86400", "peer+zk://h:1/r?session_timeout=100ms", "peer+bsm://h:1/15",
	"peer+redsync://a:1,b:2", "peer+getlock://u:p@h:1/db", "peer+pgadvisory://u:p@h:1/db",
	"redis://[::1]:6379", "zk://h:1/r?session_timeout=596h", "redis://h:1?tls=false&tls_ca=x",
	"mysql://u:p%40q@h/d%2Fb?table=%00", "x://%zz", "redis://h:1?a=1;b=2", "redis://h:1/%FF?fifo=TRUE&fifo=1",
	"redlock://h:1?drift_factor=NaN&drift_fixed=0s", "mysql://u@h/db?table=" + strings.Repeat("é", 55),
}
