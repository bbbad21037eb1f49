package conformance

import (
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Declared returns the Capabilities declared for the backend (or peer) registered
// under a URL scheme, with the defaults of that scheme's URL parameters. ok is false
// for a scheme this table does not know, and for redis+setnx, whose capabilities
// depend on its required variant parameter: use DeclaredURL.
func Declared(scheme string) (c Capabilities, ok bool) {
	return DeclaredURL(&url.URL{Scheme: scheme})
}

// DeclaredURL returns the Capabilities declared for the Locker that dlock.Open(u)
// returns: what the backend's own conformance harness declares, with the session
// timeouts and options that u's query parameters select. ok is false for an unknown
// scheme or a parameter value the scheme's opener would refuse.
//
// Not guaranteed: what depends on the servers rather than the URL. ServerRestart is
// declared for servers without synchronous persistence (a Redis with appendfsync
// always keeps its locks across a crash); a ZooKeeper session may outlive the
// requested session_timeout by up to two ticks of the ensemble (the table
// declares the requested timeout); a mysql+getlock URL without wait_timeout gets the
// server's own (MariaDB's and MySQL's default is 8 hours, which is declared).
func DeclaredURL(u *url.URL) (c Capabilities, ok bool) {
	q := u.Query()
	perLease := Capabilities{PerLeaseTTL: true, Refresh: true}
	switch u.Scheme {
	case "mem":
		return Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, FIFO: true}, true
	case "redis":
		c = Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, FaultOutcomes: map[Scenario]Status{
			ServerRestart: Violated, // an empty server comes back: every lock is gone
			ClockJump:     Violated, // Redis expires keys by its wall clock
		}}
		if n, err := strconv.Atoi(q.Get("wait_replicas")); err != nil || n < 1 {
			// Asynchronous replication: a promoted replica may never have seen the lock.
			c.FaultOutcomes[Failover] = Violated
		}
		return c, true
	case "redis+setnx":
		switch q.Get("variant") {
		case "expire", "setnx+expire": // the names redislock.ParseVariant accepts
			// A holder that dies between SETNX and EXPIRE leaves a lock that never
			// expires; DEL frees whoever holds the key now.
			return Capabilities{PerLeaseTTL: true, Weaknesses: []Property{DeadlockFreedom, OwnerOnlyRelease}}, true
		case "getset", "setnx+getset":
			// A client whose clock runs ahead takes over a live lock; DEL frees
			// whoever holds the key now.
			return Capabilities{PerLeaseTTL: true, Weaknesses: []Property{MutualExclusion, OwnerOnlyRelease}}, true
		}
		return Capabilities{}, false
	case "redlock":
		return Capabilities{PerLeaseTTL: true, Refresh: true, MinTTL: 10 * time.Millisecond, // redlock.MinTTL
			FaultOutcomes: map[Scenario]Status{ServerRestart: Violated}}, true
	case "mysql":
		return Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, MinTTL: 10 * time.Millisecond}, true // mysqllock.MinTTL
	case "mysql+getlock":
		wait := 8 * time.Hour
		if v := q.Get("wait_timeout"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return Capabilities{}, false
			}
			wait = time.Duration(n) * time.Second
		}
		return Capabilities{SessionTimeout: wait, FIFO: true}, true
	case "zk":
		d, ok := duration(q, "session_timeout", 10*time.Second) // zklock.DefaultSessionTimeout
		return Capabilities{Fencing: true, SessionTimeout: d, FIFO: true}, ok
	case "etcd":
		return Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, MinTTL: time.Second, FIFO: true}, true // etcdlock.MinTTL
	case "peer+bsm":
		// Owner-checked release and refresh by a random value, no fencing.
		return perLease, true
	case "peer+redsync":
		// The same; redsync's own timing (drift, retry delay) wants TTLs from 300ms.
		perLease.MinTTL = 300 * time.Millisecond
		return perLease, true
	case "peer+etcd":
		ttl := 60 // concurrency.NewSession's default TTL, seconds
		if v := q.Get("session_ttl"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return Capabilities{}, false
			}
			ttl = n
		}
		// Empty keys are accepted; Unlock does not tell a holder its lock was deleted.
		// A cut-off holder's Session.Done closes up to a second after the server
		// revoked its lease (clientv3 checks keep-alive deadlines once a second), so
		// another session may be granted the lock first: in some trials, not all.
		return Capabilities{Fencing: true, SessionTimeout: time.Duration(ttl) * time.Second,
			Weaknesses:    []Property{InputValidation, OwnerOnlyRelease},
			FIFO:          true, // waiters ordered by revision
			FaultOutcomes: map[Scenario]Status{Partition: Sometimes},
			FaultTrials:   map[Scenario]int{Partition: 8}}, true
	case "peer+zk":
		d, ok := duration(q, "session_timeout", 10*time.Second)
		// A lost session is not reported to the holder; a cancelled wait stays queued;
		// keys are paths taken as given.
		// A cut-off holder hears of its session's expiry only on reconnecting, after
		// the server gave the lock away (Partition).
		return Capabilities{SessionTimeout: d, Weaknesses: []Property{DeadlockFreedom, Cancellation,
			KeyIsolation, InputValidation, DoneAndErr},
			FaultOutcomes: map[Scenario]Status{Partition: Violated}}, ok
	case "peer+getlock":
		// A cut connection frees its lock at once, its client told nothing; names end
		// at the first NUL and are limited to 64 characters.
		// A paused holder's connection stays open (within wait_timeout), so its lock
		// is never granted to another while it sleeps: the pauses hold, the lock
		// unavailable instead.
		// The server queues the waiters of a name (FIFO).
		return Capabilities{FIFO: true, Weaknesses: []Property{DeadlockFreedom, KeyIsolation, InputValidation, DoneAndErr},
			FaultOutcomes: map[Scenario]Status{HolderPause: Held, HolderPauseFenced: Held}}, true
	}
	return Capabilities{}, false
}

// MustDeclare is DeclaredURL for a URL written into a test harness: it panics when
// rawURL does not parse or has no declaration, which is a bug in the harness, not
// input. Harnesses take their Capabilities from it, so the table that "dlock check"
// trusts is the one the project's own tests prove; a harness adds only what depends
// on its servers (e.g. a Redis with appendfsync always keeps its locks across a
// restart).
func MustDeclare(rawURL string) Capabilities {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("conformance.MustDeclare(%q): %v", rawURL, err))
	}
	c, ok := DeclaredURL(u)
	if !ok {
		panic(fmt.Sprintf("conformance.MustDeclare(%q): no declaration for this URL", rawURL))
	}
	return c
}

func duration(q url.Values, name string, def time.Duration) (time.Duration, bool) {
	v := q.Get(name)
	if v == "" {
		return def, true
	}
	d, err := time.ParseDuration(v)
	return d, err == nil && d > 0
}
