package dlock

import "time"

// SetOpenTimeout makes Open and Inspect bound a context without a deadline by d
// instead of OpenTimeout, until the returned function is called.
func SetOpenTimeout(d time.Duration) (restore func()) {
	old := openTimeout
	openTimeout = d
	return func() { openTimeout = old }
}
