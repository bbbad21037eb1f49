package redisops

import (
	"strconv"
	"strings"
	"sync"
)

// Key layout. For the lock named key (any valid dlock key: UTF-8, 1..255 bytes):
//
//	lock:    key                                  (the name itself, a plain string value)
//	fence:   "dlock:fence\xff{" + tag + "}" + key  (an integer, never expires)
//	channel: "dlock:release:" + key               (pub/sub channel, not a key)
//	queue:   "dlock:queue\xff{" + tag + "}" + key  (FIFO mode: a sorted set, waiter → arrival)
//	qdead:   "dlock:qdead\xff{" + tag + "}" + key  (FIFO mode: a sorted set, waiter → deadline)
//	released: "dlock:released\xff{" + tag + "}" + key + "\xff" + owner value
//	         (a tombstone: this owner released the lock; it expires when the lock would have)
//
// The lock key is the name unchanged so that any library that locks with
// SET key value NX PX on the same name excludes us and we exclude it.
//
// tag is what Redis Cluster hashes for key — the text between the first '{' and
// the first '}' after it when that text is not empty, else the whole key — so the
// fence key sits in the lock key's hash slot and one script may touch both. When
// that text contains a '}' (only possible for a key with no hash tag of its own,
// e.g. "a}b" or "{}x"), it cannot be put between braces; tag is then the shortest
// decimal number that hashes to the key's slot (SlotTag).
//
// The byte 0xff never occurs in valid UTF-8, so no lock key is ever a fence, queue,
// deadline or tombstone key.
// The first '}' after the prefix closes the tag (a tag holds no '}'), so the key is
// recovered from the rest and two keys never share a fence counter.

// FencePrefix starts every fence key; "SCAN 0 MATCH dlock:fence*" lists them.
const FencePrefix = "dlock:fence\xff"

// ChannelPrefix starts every release channel.
const ChannelPrefix = "dlock:release:"

// LockUserACL is what a Redis ACL user needs to take locks with redislock.New (also
// in fair mode, WithFIFO) or redlock.New, as arguments of ACL SETUSER after the
// user's name and password: the connection commands, the scripts of the mutex, the
// semaphores, the read-write locks, the elections and the sets of keys and every
// command they run, what election observers read (MGET, XREVRANGE, XREAD), the
// release channels, WAIT (wait_replicas) and the Cluster's slot map. Keys: the lock
// names themselves, the fencing counters, the releases' tombstones (ReleasedKey), the
// fair mode's queue and deadline keys (QueueKey, DeadlineKey), the keys of semaphores
// and read-write locks (PrimitiveKeys) and of elections (ElectionKey, ElectionTermKey, ElectionLogKey);
// narrow "~*" to the patterns of your lock names plus "~dlock:*" if you like. The
// TLS conformance tests run with exactly these rules; docs/connecting.md lists them.
var LockUserACL = []string{"on", "~*", "&" + ChannelPrefix + "*", "-@all", "+@connection", "+ping",
	"+evalsha", "+eval", "+get", "+set", "+incr", "+pttl", "+exists", "+type", "+del", "+publish", "+pexpire",
	"+time", "+zadd", "+zcard", "+zrange", "+zrangebyscore", "+zrank", "+zrem", "+zremrangebyscore", "+zscore", "+hset", "+hget", "+hmget", "+hdel",
	"+subscribe", "+unsubscribe", "+wait", "+cluster|slots", "+cluster|shards",
	"+mget", "+xadd", "+xrevrange", "+xread"}

// LockKey returns the Redis key of the lock named key: key itself.
func LockKey(key string) string { return key }

// FenceKey returns the Redis key of key's fencing counter, in the same Redis
// Cluster hash slot as LockKey(key) for every key.
func FenceKey(key string) string { return Tagged(FencePrefix, key) }

// ReleasedPrefix starts the tombstone a release leaves (ReleasedKey).
const ReleasedPrefix = "dlock:released\xff"

// ReleasedKey returns the key of the tombstone that the release of key's lock by the
// owner value leaves behind (Release), in LockKey(key)'s hash slot. It lives as long
// as the lock had left to live, so that a release run twice — a retry after a lost
// reply — can tell "already released by this owner" from "gone or someone else's".
func ReleasedKey(key, value string) string { return Tagged(ReleasedPrefix, key) + "\xff" + value }

// Tagged returns prefix + "{" + tag + "}" + key, in key's hash slot (see above):
// the layout of every key a script touches beside the lock key itself.
func Tagged(prefix, key string) string {
	tag := HashedPart(key)
	if strings.IndexByte(tag, '}') >= 0 {
		tag = SlotTag(Slot(key))
	}
	return prefix + "{" + tag + "}" + key
}

// Channel returns the pub/sub channel on which the release script announces that
// key's lock was released.
func Channel(key string) string { return ChannelPrefix + key }

// TurnChannel returns the channel on which the fair mode's release tells the waiter
// named name that it is first in key's queue: Channel(key) + "#" + name. Only that
// waiter listens there (Releases.SubscribeTurn).
func TurnChannel(key, name string) string { return Channel(key) + "#" + name }

// HashedPart returns the part of key that Redis Cluster hashes to find its slot:
// the hash tag (text between the first '{' and the next '}') if it is not empty,
// else the whole key.
func HashedPart(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Slot returns key's Redis Cluster hash slot: CRC16 (XMODEM) of HashedPart(key)
// modulo Slots, as CLUSTER KEYSLOT computes it.
func Slot(key string) int {
	return int(crc16(HashedPart(key)) % Slots)
}

// SlotTag returns the smallest non-negative number whose decimal form hashes to
// slot. It panics if slot is not in [0, Slots).
func SlotTag(slot int) string {
	return strconv.Itoa(int(slotTags()[slot]))
}

// slotTags maps each slot to the smallest number whose decimal form hashes to it.
// Built on first use (about 100k CRCs of a few bytes, a few milliseconds).
var slotTags = sync.OnceValue(func() *[Slots]uint32 {
	var t [Slots]uint32
	var seen [Slots]bool
	left := Slots
	var buf [10]byte
	for n := uint32(0); left > 0; n++ {
		s := crc16(string(strconv.AppendUint(buf[:0], uint64(n), 10))) % Slots
		if !seen[s] {
			seen[s], t[s] = true, n
			left--
		}
	}
	return &t
})

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), Redis Cluster's hash.
func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}
