package servers

import (
	"crypto/sha256"
	"debug/elf"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// libfaketimePath finds libfaketime.so.1: $FAKETIME_LIB first, then the usual
// Debian/Ubuntu multiarch and /usr/local locations.
func libfaketimePath() (string, error) {
	if p := os.Getenv("FAKETIME_LIB"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		return "", fmt.Errorf("FAKETIME_LIB=%s: not found", p)
	}
	patterns := []string{
		"/usr/lib/*/faketime/libfaketime.so.1",
		"/usr/lib/faketime/libfaketime.so.1",
		"/usr/local/lib/faketime/libfaketime.so.1",
		"/usr/lib64/faketime/libfaketime.so.1",
		"/usr/local/lib/libfaketime.so.1",
	}
	for _, pat := range patterns {
		if m, _ := filepath.Glob(pat); len(m) > 0 {
			return m[0], nil
		}
	}
	return "", missing("libfaketime", "faketime")
}

// parseFakeOffset parses the relative libfaketime offsets this package accepts:
// a sign, a number and an optional unit s, m, h, d or y (seconds when absent),
// e.g. "+30s", "-1.5h", "+0". It returns the offset and the spec to hand to
// libfaketime.
func parseFakeOffset(spec string) (time.Duration, string, error) {
	s := strings.TrimSpace(spec)
	if len(s) < 2 || (s[0] != '+' && s[0] != '-') {
		return 0, "", fmt.Errorf("fake time offset %q: want a relative offset like +30s or -5m", spec)
	}
	unit := time.Second
	num := s[1:]
	switch num[len(num)-1] {
	case 's':
		num = num[:len(num)-1]
	case 'm':
		unit, num = time.Minute, num[:len(num)-1]
	case 'h':
		unit, num = time.Hour, num[:len(num)-1]
	case 'd':
		unit, num = 24*time.Hour, num[:len(num)-1]
	case 'y':
		unit, num = 365*24*time.Hour, num[:len(num)-1]
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, "", fmt.Errorf("fake time offset %q: bad number", spec)
	}
	d := time.Duration(f * float64(unit))
	if s[0] == '-' {
		d = -d
	}
	return d, s, nil
}

//go:embed csrc/clockshim.c
var clockShimSource []byte

var clockShim struct {
	once sync.Once
	path string
	err  error
}

// clockShimPath compiles csrc/clockshim.c once (cached across runs in the user
// cache directory, keyed by the source's hash) and returns the .so path.
func clockShimPath() (string, error) {
	s := &clockShim
	s.once.Do(func() {
		var cc string
		for _, c := range []string{os.Getenv("CC"), "cc", "gcc", "clang"} {
			if c == "" {
				continue
			}
			if p, err := exec.LookPath(c); err == nil {
				cc = p
				break
			}
		}
		if cc == "" {
			s.err = &MissingError{What: "a C compiler (cc) for the clock shim",
				Install: "sudo apt-get install -y --no-install-recommends gcc libc6-dev (or: make deps)"}
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "dlock")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			s.err = err
			return
		}
		sum := sha256.Sum256(clockShimSource)
		out := filepath.Join(dir, fmt.Sprintf("clockshim-%x.so", sum[:8]))
		if _, err := os.Stat(out); err == nil {
			s.path = out
			return
		}
		src, err := os.CreateTemp(dir, "clockshim-*.c")
		if err != nil {
			s.err = err
			return
		}
		defer os.Remove(src.Name())
		if _, err := src.Write(clockShimSource); err != nil {
			src.Close()
			s.err = err
			return
		}
		src.Close()
		tmp := src.Name() + ".so"
		defer os.Remove(tmp)
		cmd := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", tmp, src.Name())
		cmd.SysProcAttr = childAttr()
		if b, err := cmd.CombinedOutput(); err != nil {
			s.err = fmt.Errorf("compiling the clock shim: %w\n%s", err, b)
			return
		}
		if err := os.Rename(tmp, out); err != nil {
			s.err = err
			return
		}
		s.path = out
	})
	return s.path, s.err
}

// linksJemalloc reports whether the binary uses jemalloc, which deadlocks
// under libfaketime (wolfcw/libfaketime#130).
func linksJemalloc(bin string) bool {
	f, err := elf.Open(bin)
	if err != nil {
		return false
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, l := range libs {
		if strings.Contains(l, "jemalloc") {
			return true
		}
	}
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "je_malloc") {
			return true
		}
	}
	return false
}

// fakeClock shifts the wall clock of one child process, through the clock
// shim (preferred: works with any allocator) or libfaketime.
type fakeClock struct {
	file string
	shim bool
}

// newFakeClock prepares the environment that runs bin with its wall clock
// shifted by d (spec is the same offset in libfaketime syntax), and the files a
// container of image (when not "") must see. Monotonic clocks stay real: only the
// wall clock moves, as with a wrong NTP setting.
func newFakeClock(bin, image, dir string, d time.Duration, spec string) (*fakeClock, []string, []string, error) {
	fc := &fakeClock{file: filepath.Join(dir, "clock-offset")}
	if image != "" {
		if err := ContainerClockSupported(); err != nil {
			return nil, nil, nil, err
		}
	}
	shim, err := clockShimPath()
	if err == nil {
		fc.shim = true
		if err := fc.set(d, spec); err != nil {
			return nil, nil, nil, err
		}
		var mounts []string
		if image != "" {
			mounts = []string{shim}
		}
		return fc, []string{"LD_PRELOAD=" + shim, "DLOCK_CLOCK_FILE=" + fc.file}, mounts, nil
	}
	if image != "" {
		// libfaketime would have to be in the image: only the shim is brought in.
		return nil, nil, nil, err
	}
	if linksJemalloc(bin) {
		return nil, nil, nil, fmt.Errorf("%s uses jemalloc, which libfaketime cannot run: %w", bin, err)
	}
	lib, lerr := libfaketimePath()
	if lerr != nil {
		return nil, nil, nil, errors.Join(err, lerr)
	}
	if err := fc.set(d, spec); err != nil {
		return nil, nil, nil, err
	}
	// The offset file is re-read at most once a second.
	return fc, []string{
		"LD_PRELOAD=" + lib,
		"FAKETIME=" + spec,
		"FAKETIME_TIMESTAMP_FILE=" + fc.file,
		"FAKETIME_CACHE_DURATION=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}, nil, nil
}

// ErrClockNotShiftable is returned where a server's clock cannot be shifted: a
// server in a container whose kernel is not this machine's (the clock shim is a
// Linux shared object built here, loaded by the server in its container).
var ErrClockNotShiftable = errors.New("servers: the clock of a server in a container can be shifted only when this machine runs Linux (the shim is a shared object built here and loaded in the container)")

// ContainerClockSupported reports, as nil or ErrClockNotShiftable, whether servers
// in containers can have their clocks shifted (RedisOptions.FakeTimeOffset,
// ShiftClock) here.
func ContainerClockSupported() error {
	if runtime.GOOS != "linux" {
		return ErrClockNotShiftable
	}
	return nil
}

// set writes a new offset; the process picks it up within 10ms (shim) or 1s
// (libfaketime).
func (fc *fakeClock) set(d time.Duration, spec string) error {
	content := spec
	if fc.shim {
		content = strconv.FormatInt(int64(d), 10)
	}
	tmp := fc.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(content+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, fc.file)
}

// RedisClockShiftable reports, as nil or the reason, whether a Redis started now
// could be given a shiftable clock (RedisOptions.FakeTimeOffset, ShiftClock): the
// local binary can (or its start-up says what is missing); a Redis in a container
// can when ContainerClockSupported. Fault harnesses use it to report the clock
// scenarios not applicable, with the reason, instead of failing.
func RedisClockShiftable() error {
	_, image, err := command("redis-server", RedisImage, redisBinary)
	if err != nil || image == "" {
		return nil
	}
	return ContainerClockSupported()
}
