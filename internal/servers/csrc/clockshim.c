// clockshim: an LD_PRELOAD library that shifts a process's wall clock by an
// offset read from a file, so a test can move a server's clock while it runs.
//
// Written for internal/servers because libfaketime cannot run programs linked
// with jemalloc (Debian's redis-server): jemalloc reads the clock while it
// initialises, libfaketime allocates while it initialises, and the two
// recurse. This shim never allocates and never resolves symbols: it reads the
// clock with the raw system call and the offset file with open/read/close.
//
// Environment: DLOCK_CLOCK_FILE names a file holding the offset in
// nanoseconds as a signed decimal integer ("60000000000"). It is re-read at
// most every 10ms. Only wall clocks (CLOCK_REALTIME, CLOCK_REALTIME_COARSE,
// gettimeofday, time, timespec_get) move; monotonic clocks stay real.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/select.h> /* struct timeval, without gettimeofday's nonnull prototype */
#include <time.h>
#include <unistd.h>

#define RECHECK_NS 10000000LL

static _Atomic long long offset_ns;
static _Atomic long long next_check_ns; /* monotonic time of the next re-read */

static int raw_clock(clockid_t id, struct timespec *ts) {
	return (int)syscall(SYS_clock_gettime, id, ts);
}

static long long parse(const char *p, long n) {
	long i = 0;
	int neg = 0;
	long long v = 0;
	while (i < n && (p[i] == ' ' || p[i] == '\t')) i++;
	if (i < n && (p[i] == '+' || p[i] == '-')) neg = p[i++] == '-';
	for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) v = v * 10 + (p[i] - '0');
	return neg ? -v : v;
}

static long long current_offset(void) {
	struct timespec now;
	if (raw_clock(CLOCK_MONOTONIC, &now) != 0) return atomic_load(&offset_ns);
	long long mono = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
	if (mono < atomic_load(&next_check_ns)) return atomic_load(&offset_ns);
	atomic_store(&next_check_ns, mono + RECHECK_NS);
	const char *path = getenv("DLOCK_CLOCK_FILE");
	if (path == NULL) return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return atomic_load(&offset_ns);
	char buf[64];
	long n = read(fd, buf, sizeof buf);
	close(fd);
	if (n > 0) atomic_store(&offset_ns, parse(buf, n));
	return atomic_load(&offset_ns);
}

static void shift(struct timespec *ts) {
	long long t = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + current_offset();
	ts->tv_sec = t / 1000000000LL;
	ts->tv_nsec = t % 1000000000LL;
	if (ts->tv_nsec < 0) {
		ts->tv_nsec += 1000000000LL;
		ts->tv_sec--;
	}
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int r = raw_clock(id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	(void)tz;
	if (tv == NULL) return 0;
	struct timespec ts;
	int r = clock_gettime(CLOCK_REALTIME, &ts);
	if (r == 0) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return r;
}

time_t time(time_t *out) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
	if (out != NULL) *out = ts.tv_sec;
	return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
	if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0) return 0;
	return base;
}
