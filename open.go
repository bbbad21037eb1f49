package dlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/spec"
)

// Opener opens a Locker for a URL of its scheme. The Locker it returns is ready to use
// (connected, with whatever the backend needs created) and its Close closes what the
// opener opened. ctx bounds the opening only (Open gives it a deadline if it has
// none, and cancels it when the opener returns): nothing that outlives the opening
// may depend on it.
type Opener func(ctx context.Context, u *url.URL) (Locker, error)

// Scheme is what a backend package registers for one URL scheme: how to open a
// Locker from a URL, and what such a Locker guarantees.
type Scheme struct {
	// Name is the URL scheme, e.g. "redis".
	Name string
	// Open opens a Locker for a URL of this scheme.
	Open Opener
	// Declare says what a Locker that Open returns for u guarantees, in the terms the
	// conformance suite checks. It accepts exactly the URLs Open accepts (an error
	// wrapping ErrInvalidURL otherwise) and contacts no server. Nil means the scheme
	// declares nothing: `dlock check` then refuses it.
	Declare func(u *url.URL) (spec.Capabilities, error)
	// Inspect reads the configuration of the deployment u names (connecting as Open
	// does) and says which fault scenarios it is exposed to: see the package-level
	// Inspect. Nil means the scheme has nothing to inspect.
	Inspect func(ctx context.Context, u *url.URL) ([]spec.Finding, error)
}

var registry struct {
	sync.RWMutex
	m map[string]Scheme
}

// Register makes a URL scheme available to Open and Declared. Backend packages call
// it from init, next to their opener; a blank import of the package registers its
// schemes. Registering a name twice, an empty name or a nil Open panics: it is a
// programming error, found at start-up.
func Register(s Scheme) {
	registry.Lock()
	defer registry.Unlock()
	if s.Name == "" || s.Open == nil {
		panic(fmt.Sprintf("dlock: Register of scheme %q without a name or an Opener", s.Name))
	}
	if registry.m == nil {
		registry.m = map[string]Scheme{}
	}
	if _, dup := registry.m[s.Name]; dup {
		panic("dlock: Register called twice for scheme " + s.Name)
	}
	registry.m[s.Name] = s
}

func lookup(scheme string) (Scheme, error) {
	registry.RLock()
	s, ok := registry.m[scheme]
	registry.RUnlock()
	if !ok {
		return s, fmt.Errorf("%w: unknown scheme %q (registered: %s; is the backend package imported?)",
			ErrInvalidURL, scheme, strings.Join(Schemes(), ", "))
	}
	return s, nil
}

// Declared returns what a Locker opened from u guarantees, as its scheme's backend
// declares it (Scheme.Declare). It returns an error wrapping ErrInvalidURL for an
// unknown scheme or a URL the scheme's opener would refuse, and one wrapping
// errors.ErrUnsupported for a scheme registered without a declaration. It contacts
// no server, so what depends on the servers (persistence, a negotiated session
// timeout) is as the backend documents for its defaults.
func Declared(u *url.URL) (spec.Capabilities, error) {
	s, err := lookup(u.Scheme)
	if err != nil {
		return spec.Capabilities{}, err
	}
	if s.Declare == nil {
		return spec.Capabilities{}, fmt.Errorf("dlock: scheme %q declares no capabilities: %w", u.Scheme, errors.ErrUnsupported)
	}
	return s.Declare(u)
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	s := make([]string, 0, len(registry.m))
	for k := range registry.m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open returns a Locker for rawURL, e.g. "redis://127.0.0.1:6379" or "mem://". The
// scheme's backend package must have been imported (a blank import is enough). It
// returns ErrInvalidURL for a URL it cannot parse (see ParseURL), an unknown scheme,
// a query parameter the backend does not know or a value out of its bounds, and the
// backend's error (wrapped) when it cannot connect. No error quotes the URL's
// password. Opening never waits without a deadline: when ctx has none, the opener
// gets OpenTimeout (a store that does not answer is an error, not a hang).
func Open(ctx context.Context, rawURL string) (Locker, error) {
	u, s, err := parseScheme(rawURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := boundOpen(ctx)
	defer cancel()
	return s.Open(ctx, u)
}

// OpenTimeout bounds Open and Inspect when their context has no deadline: a URL
// whose servers do not answer (or never grant a session) fails after it.
const OpenTimeout = 30 * time.Second

// openTimeout is OpenTimeout (tests shorten it).
var openTimeout = OpenTimeout

// boundOpen gives ctx a deadline of openTimeout if it has none.
func boundOpen(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, openTimeout)
}

// parseScheme parses rawURL (ParseURL) and looks its scheme up.
func parseScheme(rawURL string) (*url.URL, Scheme, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, Scheme{}, err
	}
	s, err := lookup(u.Scheme)
	return u, s, err
}

// Inspect connects to the deployment rawURL names, as Open would, reads the
// servers' own configuration (persistence, eviction, replicas, session limits,
// cluster health: what the backend knows to look at) and returns what it found,
// each finding named by the fault scenario (or property) of the conformance report
// that shows the risk. It changes nothing on the servers and takes no lock.
//
// It returns an error wrapping ErrInvalidURL for a URL Open would refuse, one
// wrapping errors.ErrUnsupported for a scheme registered without an Inspect, and
// the backend's error when it cannot connect. A setting the credentials may not
// read (e.g. CONFIG GET denied by an ACL) is a finding that says so, not an error.
// Like Open, it never waits without a deadline (OpenTimeout).
// Not guaranteed: the findings describe the configuration at the time of the call,
// as the server reports it; a setting the backend does not know to read is not
// covered.
func Inspect(ctx context.Context, rawURL string) ([]spec.Finding, error) {
	u, s, err := parseScheme(rawURL)
	if err != nil {
		return nil, err
	}
	if s.Inspect == nil {
		return nil, fmt.Errorf("dlock: scheme %q has no deployment inspection: %w", u.Scheme, errors.ErrUnsupported)
	}
	ctx, cancel := boundOpen(ctx)
	defer cancel()
	return s.Inspect(ctx, u)
}

// ParseURL parses a lock URL as Open does: an error wrapping ErrInvalidURL when
// rawURL is not a URL or has no scheme. Its errors never quote the URL's user
// information, which may hold a password: a malformed URL that has some is not
// quoted at all. It does not look the scheme up.
func ParseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		if strings.Contains(rawURL, "@") {
			// url.Parse quotes the whole URL, and its inner errors quote the piece
			// they stumbled on, which may be part of the password.
			return nil, fmt.Errorf("%w: malformed URL (not shown: it may hold a password); %s", ErrInvalidURL, userinfoHint)
		}
		return nil, fmt.Errorf("%w: %w (want scheme://…, one of %s)", ErrInvalidURL, err, strings.Join(Schemes(), ", "))
	}
	if u.Scheme == "" {
		if strings.Contains(rawURL, "@") {
			// Without a scheme, "secret@host" is a path: Redacted does not hide it.
			return nil, fmt.Errorf("%w: URL has no scheme (not shown: it may hold a password; want scheme://…, one of %s)", ErrInvalidURL, strings.Join(Schemes(), ", "))
		}
		return nil, fmt.Errorf("%w: %q has no scheme (want scheme://…, one of %s)", ErrInvalidURL, u.Redacted(), strings.Join(Schemes(), ", "))
	}
	return u, nil
}

// userinfoHint says how to write a user name and password into a URL.
const userinfoHint = "in a user name or password, %-escape what URLs reserve (@ as %40, / as %2F, ? as %3F, # as %23, % as %25, : in a user name as %3A)"

// ParseQuery parses u's query for a scheme's opener, strictly: it returns an error
// wrapping ErrInvalidURL that names the parameter when a pair is malformed (bad
// escaping, a ';' separator), when a parameter is given twice, or when one is not in
// known. A URL opener uses it instead of u.Query, which drops malformed pairs
// silently (two clients whose typos differed would not exclude each other). Errors
// name parameters, never values: a value may be a secret.
func ParseQuery(u *url.URL, known ...string) (Query, error) {
	q := Query{}
	for pair := range strings.SplitSeq(u.RawQuery, "&") {
		if pair == "" {
			continue
		}
		rawKey, rawValue, _ := strings.Cut(pair, "=")
		k, err := url.QueryUnescape(rawKey)
		if err != nil || strings.Contains(pair, ";") {
			return nil, fmt.Errorf("%w: malformed query parameter %q (want name=value pairs joined by &)", ErrInvalidURL, redactPair(rawKey))
		}
		v, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, fmt.Errorf("%w: query parameter %q: malformed value (bad %%-escape)", ErrInvalidURL, k)
		}
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return nil, fmt.Errorf("%w: unknown query parameter %q (scheme %s takes none)", ErrInvalidURL, k, u.Scheme)
			}
			return nil, fmt.Errorf("%w: unknown query parameter %q (scheme %s takes %s)", ErrInvalidURL, k, u.Scheme, strings.Join(known, ", "))
		}
		if _, dup := q[k]; dup {
			return nil, fmt.Errorf("%w: query parameter %q given twice", ErrInvalidURL, k)
		}
		q[k] = v
	}
	return q, nil
}

// Query is a URL's query as ParseQuery read it: each parameter given, with its
// value. Its methods read one parameter each, within bounds: every URL parameter of
// every scheme has a floor and a ceiling (docs/connecting.md), so that no value
// wraps, truncates or stalls a client. Their errors wrap ErrInvalidURL and name the
// parameter, the value and the bounds: use them for values that are no secret.
type Query map[string]string

// Duration returns the parameter name as a Go duration ("250ms", "10s") within
// [lo, hi], or def when the query does not give it.
func (q Query) Duration(name string, def, lo, hi time.Duration) (time.Duration, error) {
	return bounded(q, name, def, lo, hi, time.ParseDuration, "a Go duration")
}

// Int returns the parameter name as a decimal integer within [lo, hi], or def when
// the query does not give it.
func (q Query) Int(name string, def, lo, hi int) (int, error) {
	return bounded(q, name, def, lo, hi, strconv.Atoi, "a whole number")
}

// Float returns the parameter name as a decimal number within [lo, hi] (never NaN
// or infinite), or def when the query does not give it.
func (q Query) Float(name string, def, lo, hi float64) (float64, error) {
	return bounded(q, name, def, lo, hi, func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }, "a number")
}

// bounded reads the parameter name of q with parse, within [lo, hi] (a NaN fails
// both comparisons), or returns def when q does not give it; what names the kind of
// value in the error.
func bounded[T int | time.Duration | float64](q Query, name string, def, lo, hi T, parse func(string) (T, error), what string) (T, error) {
	v, ok := q[name]
	if !ok {
		return def, nil
	}
	x, err := parse(v)
	if err != nil || !(x >= lo && x <= hi) {
		return 0, fmt.Errorf("%w: %s=%q: want %s from %v to %v", ErrInvalidURL, name, v, what, lo, hi)
	}
	return x, nil
}

// Bool returns the parameter name as true or false (or another spelling
// strconv.ParseBool takes), or def when the query does not give it.
func (q Query) Bool(name string, def bool) (bool, error) {
	v, ok := q[name]
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q: want true or false", ErrInvalidURL, name, v)
	}
	return b, nil
}

// redactPair shortens a malformed parameter name for an error message: only the part
// before a ';', which may join it to a value.
func redactPair(k string) string {
	k, _, _ = strings.Cut(k, ";")
	return k
}
