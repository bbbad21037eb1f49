//go:build unix

package fence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Dir is a Guard whose fences are files in a directory of the local file system,
// and whose guarded write (WriteFile) replaces a file only when the rule accepts the
// token: the guard of files that the processes of one host write. Safe for
// concurrent use, by goroutines and by processes (each with its own Dir on the same
// directory).
//
// For each resource it keeps two files in the directory, named after the resource:
// "<name>.lock", on which a check takes an exclusive flock(2), and "<name>.fence",
// the fence ("<token>\n<writer>\n"), replaced by rename(2) and fsynced before the
// write it admits. The kernel drops the flock of a process that dies, so a crashed
// writer blocks nobody; a paused one (SIGSTOP, a debugger) inside WriteFile holds
// the resource until it resumes. Neither file may be deleted while any process can
// use the resource (a deleted lock file lets two writers in at once).
//
// Guaranteed, on a local file system of one host: a write accepted by WriteFile
// lands (renamed into place, fsynced) before any newer token is decided; a refused
// write does not touch the file; the fence is on disk before the file it admits,
// so a crash between the two leaves the fence advanced and the older writers
// refused. Readers see the old file or the new one, never a mix (rename).
//
// Not guaranteed: on a network file system (NFS, SMB), where flock is emulated by
// the server's lock manager and the client caches names and attributes, two hosts
// may both decide against a stale fence; writes that bypass WriteFile; file systems
// whose rename is not atomic. Object stores have no flock: see docs/fencing.md for
// the conditional writes (If-Match, If-None-Match) that do the same there.
type Dir struct{ path string }

// NewDir returns the Dir in path, creating the directory (0700) if needed.
func NewDir(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	return &Dir{path: path}, nil
}

// Check applies the rule (see Guard) under the resource's file lock, which it waits
// for until ctx ends (polling it every few milliseconds: flock has no wake-up that a
// context can cancel).
func (d *Dir) Check(ctx context.Context, resource string, token uint64, writer string) error {
	return d.guard(ctx, resource, token, writer, nil)
}

// WriteFile is Dir's guarded write: when the rule accepts token and writer for
// resource, it replaces the file name with data (written to a temporary file in the
// same directory, fsynced, given perm, renamed over name, the directory fsynced),
// all under the resource's file lock; else it returns the refusal (ErrStale) and
// touches nothing. An error after the fence has moved (a full disk) leaves the
// fence moved and name as it was: the write failed, and older grants stay refused.
func (d *Dir) WriteFile(ctx context.Context, resource string, token uint64, writer, name string, data []byte, perm fs.FileMode) error {
	return d.guard(ctx, resource, token, writer, func() error { return replaceFile(name, data, perm) })
}

// Fence reads resource's fence: the highest token accepted and its writer (the zero
// State if none).
func (d *Dir) Fence(resource string) (State, error) {
	return readFence(d.base(resource) + ".fence")
}

// base is the path of resource's files without their suffix: "r-" and the resource
// escaped for a file name, or "h-" and its SHA-256 when that would be too long.
func (d *Dir) base(resource string) string {
	name := "r-" + url.PathEscape(resource)
	if len(name) > 200 {
		sum := sha256.Sum256([]byte(resource))
		name = "h-" + hex.EncodeToString(sum[:])
	}
	return filepath.Join(d.path, name)
}

func (d *Dir) guard(ctx context.Context, resource string, token uint64, writer string, write func() error) error {
	if err := Validate(resource, token, writer); err != nil {
		return err
	}
	base := d.base(resource)
	lock, err := os.OpenFile(base+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	defer lock.Close() // releases the flock
	if err := flock(ctx, lock); err != nil {
		return err
	}
	cur, err := readFence(base + ".fence")
	if err != nil {
		return err
	}
	next, err := cur.Admit(resource, token, writer)
	if err != nil {
		return err
	}
	if next != cur {
		if err := replaceFile(base+".fence", []byte(fmt.Sprintf("%d\n%s\n", next.Token, next.Writer)), 0o600); err != nil {
			return err
		}
	}
	if write == nil {
		return nil
	}
	return write()
}

// flock takes an exclusive flock on f, polling until ctx ends.
func flock(ctx context.Context, f *os.File) error {
	wait := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
			return fmt.Errorf("fence: flock %s: %w", f.Name(), err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// readFence reads a fence file; a missing one is the zero State.
func readFence(path string) (State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("fence: %w", err)
	}
	tok, writer, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "\n")
	t, err := strconv.ParseUint(tok, 10, 64)
	if !ok || err != nil || t == 0 || writer == "" {
		return State{}, fmt.Errorf("%w: the fence file %s is not a token and a writer", ErrInvalid, path)
	}
	return State{Token: t, Writer: writer}, nil
}

// replaceFile replaces name with data, durably: a temporary file in name's
// directory, fsynced, renamed over name, then the directory fsynced.
func replaceFile(name string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("fence: writing %s: %w", name, err)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), name); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
