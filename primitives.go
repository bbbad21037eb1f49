package dlock

// The coordination primitives beyond the mutex (semaphores, read-write locks,
// elections, multi-key locks) are offered by a backend through optional driver
// interfaces and handed out as the same Lease, under the same machinery as the
// mutex (locker.acquire with a request of their own). A user reaches them through
// the Locker a backend returned, which may be wrapped (Instrument, a URL opener
// that owns its clients): core finds what is underneath.

// Unwrapper is implemented by a Locker that wraps another to add behaviour (dlock's
// Instrument, the Lockers URL openers return). Unwrap returns the wrapped Locker, so
// that the primitives find the backend underneath. A wrapper of your own should
// implement it too.
type Unwrapper interface {
	Unwrap() Locker
}

// Unwrap returns the wrapped Locker.
func (o observed) Unwrap() Locker { return o.Locker }

// core returns the Locker that New made underneath l (looking through Unwrap), and
// the Observer of the outermost Instrument on the way (nil if none). ok is false
// when l was not made by New: a Locker of another kind has no primitives.
func core(l Locker) (c *locker, obs Observer, ok bool) {
	for depth := 0; l != nil && depth < 64; depth++ {
		switch x := l.(type) {
		case *locker:
			return x, obs, true
		case observed:
			if obs == nil {
				obs = x.obs
			}
			l = x.Locker
		case Unwrapper:
			l = x.Unwrap()
		default:
			return nil, nil, false
		}
	}
	return nil, nil, false
}
