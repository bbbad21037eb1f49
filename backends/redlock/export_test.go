package redlock

// GateIndex is the index of key's gate among n masters (tiebreak.go).
func GateIndex(key string, n int) int { return gateIndex(key, n) }

// QueueKey is the key of key's queue of waiters on a master (queue.go).
func QueueKey(key string) string { return queueKey(key) }

// DeadlineKey is the key of the deadlines of key's waiters on a master (queue.go).
func DeadlineKey(key string) string { return deadlineKey(key) }

// VoteHash and WaitHash are the SHA1 digests of vote.lua and wait.lua, as EVALSHA
// names them.
var VoteHash, WaitHash = voteScript.hash, waitScript.hash

// IsSyntaxError is isSyntaxError: a master's "ERR syntax error" reply.
var IsSyntaxError = isSyntaxError

// WithScriptVotes makes every vote of a TryAcquire round run vote.lua, as on a
// master before Redis 7.0 (which rejects SET with NX and GET).
func WithScriptVotes() Option { return func(c *config) { c.scriptVotes = true } }
