package dlock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9/logging"

	"github.com/dlock-go/dlock"
	_ "github.com/dlock-go/dlock/backends/all"
	"github.com/dlock-go/dlock/internal/schemetest"
)

func init() {
	// The backends say why a server did not answer; go-redis's own log lines (every
	// failed dial) would only repeat it.
	logging.Disable()
}

// schemeURLs gives, for every scheme the module registers, a URL its opener accepts
// (no server answers at 127.0.0.1:1) and one query parameter it knows ("" for none).
var schemeURLs = map[string]schemetest.Example{
	"mem":               {"mem://", ""},
	"etcd":              {"etcd://127.0.0.1:1/p", "tls_server_name=x"},
	"mysql":             {"mysql://u@127.0.0.1:1/db", "table=t"},
	"mysql+getlock":     {"mysql+getlock://u@127.0.0.1:1/db", "wait_timeout=5"},
	"postgres":          {"postgres://u@127.0.0.1:1/db", "table=t"},
	"postgresql":        {"postgresql://u@127.0.0.1:1/db", "fifo=true"},
	"postgres+advisory": {"postgres+advisory://u@127.0.0.1:1/db", "session_timeout=5s"},
	"redis":             {"redis://127.0.0.1:1", "wait_replicas=1"},
	"rediss":            {"rediss://127.0.0.1:1", "tls_server_name=x"},
	"redis+setnx":       {"redis+setnx://127.0.0.1:1?variant=expire", "cluster=false"},
	"redlock":           {"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "node_timeout=10ms"},
	"zk":                {"zk://127.0.0.1:1/r", "session_timeout=5s"},
}

// TestStrictQueryEveryScheme: for every registered scheme, a malformed query, a
// repeated parameter and an unknown one are ErrInvalidURL naming the parameter, from
// Declared and from Open alike (before any connection is tried).
func TestStrictQueryEveryScheme(t *testing.T) {
	schemetest.Every(t, schemeURLs, schemetest.StrictQuery)
}

// TestNoSecretInErrors: for every registered scheme, the errors of Open, Declared
// and Inspect show no password: a malformed URL, a bad parameter, a server that does
// not answer.
func TestNoSecretInErrors(t *testing.T) {
	schemetest.Every(t, schemeURLs, schemetest.NoSecret)
}

// TestOpenNeverHangs: for every registered scheme, Open and Inspect given a
// context without a deadline, against servers that accept connections and never
// answer, return an error by the open timeout (shortened here to 300ms), not never:
// `dlock run` opens without a deadline.
func TestOpenNeverHangs(t *testing.T) {
	defer dlock.SetOpenTimeout(300 * time.Millisecond)()
	schemetest.Every(t, schemeURLs, schemetest.OpenNeverHangs(5*time.Second))
}

var redisBounds = map[string]schemetest.Bound{
	"wait_replicas":   {OK: []string{"0", "100"}, Bad: []string{"-1", "101", "1e3", "x"}, Want: "from 0 to 100"},
	"wait_timeout":    {With: "wait_replicas=1", OK: []string{"1ms", "1m"}, Bad: []string{"999us", "1m0.001s", "0", "-1s"}, Want: "from 1ms to 1m0s"},
	"fifo":            {OK: []string{"true", "false"}, Bad: []string{"yes"}, Want: "want true or false"},
	"cluster":         {OK: []string{"true", "false"}, Bad: []string{"yes"}, Want: "want true or false"},
	"sentinel_master": {None: "a name the Sentinels know, compared by them"},
}

// bounds are the bounds of every query parameter of every backend's scheme (the
// TLS parameters' are schemetest.TLSBounds; the peers' are the lab's).
var bounds = map[string]map[string]schemetest.Bound{
	"mem":         {},
	"etcd":        {},
	"redis":       redisBounds,
	"rediss":      redisBounds,
	"redis+setnx": {"variant": {None: "one of expire, getset"}, "cluster": redisBounds["cluster"], "sentinel_master": redisBounds["sentinel_master"]},
	"redlock": {
		"node_timeout": {OK: []string{"1ms", "1m"}, Bad: []string{"999us", "1m0.001s", "0s"}, Want: "from 1ms to 1m0s"},
		"drift_factor": {With: "drift_fixed=2ms", OK: []string{"0", "0.5"}, Bad: []string{"NaN", "-0.01", "0.51", "Inf", "1"}, Want: "from 0 to 0.5"},
		"drift_fixed":  {With: "drift_factor=0", OK: []string{"1ms", "1s"}, Bad: []string{"0s", "999us", "1.001s"}, Want: "from 1ms to 1s"},
	},
	"mysql": {
		"table": {OK: []string{"t", strings.Repeat("t", 54), strings.Repeat("é", 54)}, Bad: []string{"", strings.Repeat("t", 55), strings.Repeat("t", 64)}, Want: "want 1 to 54 characters"},
		"fifo":  redisBounds["fifo"],
	},
	"mysql+getlock": {
		"wait_timeout":   {OK: []string{"1", "31536000"}, Bad: []string{"0", "31536001", "9300000000"}, Want: "from 1 to 31536000"},
		"check_interval": {OK: []string{"100ms", "1h"}, Bad: []string{"1ns", "99ms", "1h0m1s"}, Want: "from 100ms to 1h0m0s"},
		"max_conns":      {OK: []string{"1", "100000"}, Bad: []string{"0", "100001"}, Want: "from 1 to 100000"},
	},
	"zk":                {"session_timeout": schemetest.SessionTimeoutBounds},
	"postgres":          postgresBounds,
	"postgresql":        postgresBounds,
	"postgres+advisory": postgresAdvisoryBounds,
}

// postgresBounds are the bounds of postgres:// (and postgresql://) URLs.
var postgresBounds = map[string]schemetest.Bound{
	"table":           {OK: []string{"t", strings.Repeat("t", 53)}, Bad: []string{"", strings.Repeat("t", 54)}, Want: "want 1 to 53 bytes"},
	"fifo":            redisBounds["fifo"],
	"sslmode":         {None: "one of disable, require, verify-ca, verify-full"},
	"connect_timeout": {OK: []string{"100ms", "1m"}, Bad: []string{"99ms", "1m0.001s", "0s"}, Want: "from 100ms to 1m0s"},
	"max_conns":       {OK: []string{"1", "1000"}, Bad: []string{"0", "1001"}, Want: "from 1 to 1000"},
}

// postgresAdvisoryBounds are the bounds of postgres+advisory:// URLs.
var postgresAdvisoryBounds = map[string]schemetest.Bound{
	"registry":        {OK: []string{"r", strings.Repeat("r", 63)}, Bad: []string{"", strings.Repeat("r", 64)}, Want: "want 1 to 63 bytes"},
	"session_timeout": {OK: []string{"1s", "24h"}, Bad: []string{"999ms", "24h0m1s", "0s"}, Want: "from 1s to 24h0m0s"},
	"check_interval":  {OK: []string{"10ms", "1h"}, Bad: []string{"9ms", "1h0m1s"}, Want: "from 10ms to 1h0m0s"},
	"sslmode":         postgresBounds["sslmode"],
	"connect_timeout": postgresBounds["connect_timeout"],
	"max_conns":       postgresBounds["max_conns"],
}

// TestBoundsEveryScheme: every query parameter of every registered scheme has a
// floor and a ceiling, or a stated reason it needs none: Declared (and so Open)
// accepts the values at the bounds and refuses those beyond with ErrInvalidURL
// naming the parameter and the bounds.
func TestBoundsEveryScheme(t *testing.T) {
	schemetest.Every(t, schemeURLs, schemetest.Bounds(bounds))
}
