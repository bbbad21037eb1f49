package pglock

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Advisory locks are named by a 64-bit integer; dlock's keys are strings of up to
// 255 bytes. A hash maps a key to an id, and two keys that hash alike must not
// silently share a lock: the key registry, a small table of (id, key) rows, records
// which key each id was given to. A key's id is the first of its candidate ids
// (AdvisoryID's, then hashes of the key with a counter) that is free in the
// registry or already registered to it; registering is one INSERT … ON CONFLICT DO
// NOTHING that also reads the row back. Registrations are never deleted, so every
// client computes the same id for a key, and a Locker keeps the ids it has seen (a
// lock of a known key costs no registry round trip).
//
// Why a hash and a registry rather than ids from a sequence: ids stay what
// AdvisoryID computes (an operator can find a key's lock in pg_locks without the
// table, and the registry is only consulted for new keys), and a collision — about
// one in 2^64 per pair of keys — is caught rather than assumed away.
//
// Not covered: advisory locks that other programs take with ids of their own in the
// same database and the same (bigint) lock space; the registry does not know them.

// createRegistry is the key registry.
const createRegistry = `CREATE TABLE IF NOT EXISTS %s (
  id       bigint PRIMARY KEY,
  lock_key bytea NOT NULL UNIQUE
)`

// registerSQL registers key under id unless the id (or the key) is taken, and
// returns the key the id belongs to — or no row when the row that took it was
// committed after this statement's snapshot (run it again). Arguments: id, key.
const registerSQL = `WITH ins AS (INSERT INTO %[1]s (id, lock_key) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING lock_key)
SELECT lock_key FROM ins UNION ALL SELECT lock_key FROM %[1]s WHERE id = $1 LIMIT 1`

// maxProbes bounds the candidate ids of one key: past it the registry is full of
// collisions, which no sane hash produces.
const maxProbes = 64

// AdvisoryID returns the advisory lock id (pg_advisory_lock's bigint) a key gets
// unless another key registered it first: the first 8 bytes of the SHA-256 of the
// key, big-endian, as a signed integer. The key's actual id is in the registry:
// SELECT id FROM dlock_advisory_keys WHERE lock_key = convert_to(key, 'UTF8').
// The ids of semaphores' slots and read-write locks are those of the names
// driver.SemaphoreWake and generic.SlotKey give them, never a mutex's key.
func AdvisoryID(key string) int64 { return candidate(key, 0) }

// candidate is the i-th candidate id of key. A test may replace it to make keys
// collide.
var candidate = func(key string, i int) int64 {
	if i > 0 {
		key += "\x00" + strconv.Itoa(i)
	}
	sum := sha256.Sum256([]byte(key))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// maxIDs bounds the ids a Locker keeps; past it they are forgotten and looked up
// again.
const maxIDs = 1 << 16

// register returns key's id, from the Locker's memory or the registry (through q).
func (d *advisoryDriver) register(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key string) (int64, error) {
	d.mu.Lock()
	id, ok := d.ids[key]
	d.mu.Unlock()
	if ok {
		return id, nil
	}
	for i, retries := 0, 0; i < maxProbes; {
		id = candidate(key, i)
		var owner []byte
		err := q.QueryRow(ctx, d.registerSQL, id, []byte(key)).Scan(&owner)
		switch {
		case errors.Is(err, pgx.ErrNoRows) && retries < 10:
			retries++ // taken by a registration this snapshot does not see: look again
			continue
		case err != nil:
			return 0, fmt.Errorf("key registry %s: %w", quoteIdent(d.opts.registry), err)
		case string(owner) != key:
			i++ // a collision: the next candidate
			continue
		}
		d.mu.Lock()
		if len(d.ids) >= maxIDs {
			d.ids = map[string]int64{}
		}
		d.ids[key] = id
		d.mu.Unlock()
		return id, nil
	}
	return 0, fmt.Errorf("key registry %s: no free id among %d candidates of key %q", quoteIdent(d.opts.registry), maxProbes, key)
}
