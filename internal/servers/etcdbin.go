package servers

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// The etcd member binary. etcd's server is a dependency of the lab module
// (github.com/dlock-go/dlock/lab), not of this one: a library user's module graph
// must not carry it. So a member runs as a process of lab/cmd/dlock-etcd, a small main
// that takes the etcd command's own flags (those Etcd.flags writes), built from this
// source checkout on first use and cached in the user cache directory, keyed by what
// decides its content: lab/go.sum, the main's source and the Go toolchain.

// EnvEtcdBin names an etcd member binary to run instead of building one: a build of
// lab/cmd/dlock-etcd, or an etcd release binary (it takes the same flags).
const EnvEtcdBin = "DLOCK_ETCD_BIN"

// etcdMain is the package of the member binary, relative to the lab module.
const etcdMain = "./cmd/dlock-etcd"

var etcdBuilt struct {
	once sync.Once
	path string
	err  error
}

// EtcdBinary returns the etcd member binary: $DLOCK_ETCD_BIN, else the cached build
// of lab/cmd/dlock-etcd, built now if it is not there (once per machine and source;
// concurrent test binaries wait for one build). Without the source or the go command,
// or when the build fails, the error is a *MissingError holding the command that
// builds it. make deps builds it ahead.
func EtcdBinary() (string, error) {
	if p := strings.TrimSpace(os.Getenv(EnvEtcdBin)); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("servers: %s=%s is not an executable file", EnvEtcdBin, p)
		}
		return p, nil
	}
	etcdBuilt.once.Do(func() { etcdBuilt.path, etcdBuilt.err = buildEtcd() })
	return etcdBuilt.path, etcdBuilt.err
}

// etcdBinary is EtcdBinary for command().
func etcdBinary() (string, error) { return EtcdBinary() }

// etcdMissing is the *MissingError of a member binary that cannot be had.
func etcdMissing(why, lab, out string) error {
	build := "make deps"
	if lab != "" {
		build += " (or: go build -C " + lab + " -o " + out + " " + etcdMain + ")"
	}
	return &MissingError{What: "the etcd member binary (" + why + ")",
		Install: build + "; or set " + EnvEtcdBin + " to an etcd binary"}
}

// labDir finds the lab module of this source checkout: beside this file's package
// (two levels up), else above the working directory.
func labDir() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, d := range starts {
		for {
			lab := filepath.Join(d, "lab")
			if b, err := os.ReadFile(filepath.Join(lab, "go.mod")); err == nil &&
				bytes.Contains(b, []byte("module github.com/dlock-go/dlock/lab")) {
				return lab, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", errors.New("no dlock source checkout (lab/go.mod) above " + strings.Join(starts, " or "))
}

// etcdKey identifies the binary a build would make: lab/go.sum, the main's source and
// the toolchain that builds it.
func etcdKey(goBin, lab string) (string, error) {
	h := sha256.New()
	sum, err := os.ReadFile(filepath.Join(lab, "go.sum"))
	if err != nil {
		return "", err
	}
	h.Write(sum)
	srcs, err := filepath.Glob(filepath.Join(lab, etcdMain, "*.go"))
	if err != nil || len(srcs) == 0 {
		return "", fmt.Errorf("no Go files in %s", filepath.Join(lab, etcdMain))
	}
	slices.Sort(srcs)
	for _, f := range srcs {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	env, err := exec.Command(goBin, "env", "GOVERSION", "GOOS", "GOARCH").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	h.Write(env)
	return fmt.Sprintf("%x", h.Sum(nil)[:8]), nil
}

// buildEtcd returns the cached member binary, building it first when it is absent.
func buildEtcd() (string, error) {
	lab, err := labDir()
	if err != nil {
		return "", etcdMissing(err.Error(), "", "")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		if p := filepath.Join(runtime.GOROOT(), "bin", "go"); runtime.GOROOT() != "" {
			goBin, err = p, nil
			if _, serr := os.Stat(p); serr != nil {
				err = serr
			}
		}
	}
	if err != nil {
		return "", etcdMissing("no go command to build it", lab, "BIN")
	}
	key, err := etcdKey(goBin, lab)
	if err != nil {
		return "", etcdMissing(err.Error(), lab, "BIN")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	cache = filepath.Join(cache, "dlock")
	final := filepath.Join(cache, "dlock-etcd-"+key)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// One build at a time on this machine: test binaries of several packages start
	// members at once.
	lock, err := os.OpenFile(filepath.Join(cache, "dlock-etcd.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(final); err == nil {
		return final, nil // built by another process while this one waited
	}
	tmp := fmt.Sprintf("%s.tmp-%d", final, os.Getpid())
	defer os.Remove(tmp)
	fmt.Fprintf(os.Stderr, "servers: building the etcd member binary (%s in %s; once per machine and source)\n", etcdMain, lab)
	out, err := exec.Command(goBin, "build", "-C", lab, "-o", tmp, etcdMain).CombinedOutput()
	if err != nil {
		return "", etcdMissing(fmt.Sprintf("go build failed: %v: %s", err, tail(string(out), 10)), lab, final)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	return final, nil
}
