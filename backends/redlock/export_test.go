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
