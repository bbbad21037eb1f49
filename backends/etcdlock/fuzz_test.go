package etcdlock

import (
	"net/url"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parser of etcd:// URLs on any input (urlfuzz.Fuzz: no panic,
// errors wrap dlock.ErrInvalidURL and show no password, the declaration agrees);
// an accepted URL names endpoints host:port and a prefix New takes (no segment of
// a namespace of its own).
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, urlfuzz.Target{Schemes: []string{Scheme}, Declare: urlfuzz.Declaration(declare),
		Parse: func(t *testing.T, u *url.URL) error {
			e, err := parseURL(u)
			if err != nil {
				return err
			}
			urlfuzz.CheckHosts(t, u, e.endpoints)
			if validatePrefix(strings.TrimRight(e.prefix, "/")) != nil {
				t.Fatalf("%s: prefix %q", u.Redacted(), e.prefix)
			}
			return nil
		}})
}

// FuzzKeys: for any two valid keys a and b and any prefix p with a nested prefix
// p/s: a key's queue gives the key back (path-unescaping its last segment) and
// never contains another key's queue, nor a primitive's or an election's (each
// Locker's namespaces stay apart); and no key of a Locker on p/s is a contender of
// a queue of p's (nested prefixes block nothing), while a contender's own key is.
func FuzzKeys(f *testing.F) {
	for _, k := range [][4]string{{"a", "b", "/dlock", "a"}, {"a/b", "a", "/p", "x"}, {"a%2Fb", "a/b", "/", "a%2Fb"},
		{"!primitives", ";election", "/p", "!primitives"}, {".", "..", "/p/", "."}, {"a", "a", "/p", "a/b/c"}, {"\xff", "é", "p", ""}} {
		f.Add(k[0], k[1], k[2], k[3])
	}
	f.Fuzz(func(t *testing.T, a, b, p, s string) {
		if dlock.ValidateKey(a) != nil || dlock.ValidateKey(b) != nil || validatePrefix(p) != nil {
			return
		}
		qa := QueueName(p, a) + "/"
		last := qa[strings.LastIndexByte(qa[:len(qa)-1], '/')+1 : len(qa)-1]
		if back, err := url.PathUnescape(last); err != nil || back != a {
			t.Fatalf("the queue of %q under %q is %q: its segment gives back %q (%v)", a, p, qa, back, err)
		}
		others := map[string]string{"primitive " + a: PrimitiveQueue(p, a), "election " + a: ElectionName(p, a) + "/"}
		if a != b {
			others["lock "+b] = QueueName(p, b) + "/"
			others["primitive "+b] = PrimitiveQueue(p, b)
			others["election "+b] = ElectionName(p, b) + "/"
		}
		for what, q := range others {
			if strings.HasPrefix(q, qa) || strings.HasPrefix(qa, q) {
				t.Fatalf("the queue of %q under %q, %q, and that of %s, %q, nest", a, p, qa, what, q)
			}
		}
		own := &mvccpb.KeyValue{Key: []byte(qa + "694d7a2b9c1e3f05")}
		if len(contenders(qa, []*mvccpb.KeyValue{own})) != 1 {
			t.Fatalf("a contender's key %q is not one of %q", own.Key, qa)
		}
		inner := strings.TrimRight(p, "/") + "/" + s
		if validatePrefix(inner) != nil || strings.TrimRight(inner, "/") == strings.TrimRight(p, "/") {
			return // refused, or the same prefix
		}
		for _, q := range []string{QueueName(inner, b) + "/", PrimitiveQueue(inner, b), ElectionName(inner, b) + "/"} {
			k := &mvccpb.KeyValue{Key: []byte(q + "694d7a2b9c1e3f05")}
			if strings.HasPrefix(string(k.Key), qa) && len(contenders(qa, []*mvccpb.KeyValue{k})) != 0 {
				t.Fatalf("%q, a key of the prefix %q, counts as a contender of %q (prefix %q)", k.Key, inner, qa, p)
			}
		}
	})
}
