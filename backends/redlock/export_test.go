package redlock

// GateIndex is the index of key's gate among n masters (tiebreak.go).
func GateIndex(key string, n int) int { return gateIndex(key, n) }
