//go:build unix

package fence_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/fencetest"
)

func newDir(t *testing.T) *fence.Dir {
	d, err := fence.NewDir(filepath.Join(t.TempDir(), "fences"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dirWrite is Dir's guarded write of value into the file named after the resource
// in data.
func dirWrite(d *fence.Dir, data string) fencetest.Write {
	return func(ctx context.Context, resource string, token uint64, writer, value string) error {
		return d.WriteFile(ctx, resource, token, writer, filepath.Join(data, url.PathEscape(resource)), []byte(value), 0o644)
	}
}

func dirRead(t *testing.T, data string) fencetest.Read {
	return func(_ context.Context, resource string) string {
		b, err := os.ReadFile(filepath.Join(data, url.PathEscape(resource)))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// TestDirLateWrite: the stale holder's late WriteFile is refused and leaves the
// file as the next holder wrote it.
func TestDirLateWrite(t *testing.T) {
	a, b := memLockers(t)
	d, data := newDir(t), t.TempDir()
	fencetest.LateWrite(t, a, b, "invoices/42", 100*time.Millisecond, dirWrite(d, data), dirRead(t, data))
	f, err := d.Fence("invoices/42")
	if err != nil || f.Token == 0 || f.Writer == "" {
		t.Fatalf("Fence = %+v, %v after two accepted grants", f, err)
	}
}

// TestDirConcurrent: concurrent writers of one process (each WriteFile its own
// open file and flock) end with the largest token's file.
func TestDirConcurrent(t *testing.T) {
	d, data := newDir(t), t.TempDir()
	fencetest.Concurrent(t, "r", 30, dirWrite(d, data), dirRead(t, data))
}

const (
	envDirChild = "FENCE_TEST_DIR_CHILD" // fences directory, data file
	envTokens   = "FENCE_TEST_TOKENS"
)

// TestDirAcrossProcesses: four processes, each with a Dir of its own on one
// directory, write tokens 1..40 (interleaved) into one file at once; the file ends
// with 40, and every refusal is ErrStale.
func TestDirAcrossProcesses(t *testing.T) {
	fences, data := filepath.Join(t.TempDir(), "fences"), filepath.Join(t.TempDir(), "data")
	const procs, n = 4, 40
	var cmds []*exec.Cmd
	for p := range procs {
		var toks []string
		for tok := n - p; tok > 0; tok -= procs {
			toks = append(toks, strconv.Itoa(tok))
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestDirChildProcess$")
		cmd.Env = append(os.Environ(), envDirChild+"="+fences+","+data, envTokens+"="+strings.Join(toks, ","))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if out := cmd.Wait(); out != nil {
			t.Errorf("a writer process: %v", out)
		}
	}
	if b, err := os.ReadFile(data); err != nil || string(b) != strconv.Itoa(n) {
		t.Fatalf("the file holds %q (%v), want %d", b, err, n)
	}
}

// TestDirChildProcess is a writer process of TestDirAcrossProcesses (skipped
// unless it started this process).
func TestDirChildProcess(t *testing.T) {
	env := os.Getenv(envDirChild)
	if env == "" {
		t.Skip("a helper process of TestDirAcrossProcesses")
	}
	fences, data, _ := strings.Cut(env, ",")
	d, err := fence.NewDir(fences)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range strings.Split(os.Getenv(envTokens), ",") {
		tok, _ := strconv.ParseUint(s, 10, 64)
		err := d.WriteFile(context.Background(), "shared", tok, "writer-"+s, data, []byte(s), 0o644)
		if err != nil && !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token %d: %v", tok, err)
		}
	}
}

// TestDirRefusedWriteTouchesNothing: a refused WriteFile leaves the file (and the
// fence) alone; a resource whose name is too long for a file name still works.
func TestDirRefusedWriteTouchesNothing(t *testing.T) {
	d, data := newDir(t), filepath.Join(t.TempDir(), "f")
	long := strings.Repeat("ü", 120) // 240 bytes, 720 escaped
	for _, res := range []string{"a/../b", long} {
		ctx := context.Background()
		if err := d.WriteFile(ctx, res, 3, "w3", data, []byte("three"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := d.WriteFile(ctx, res, 2, "w2", data, []byte("two"), 0o600)
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 2 after 3: %v", err)
		}
		if b, _ := os.ReadFile(data); string(b) != "three" {
			t.Fatalf("the refused write changed the file to %q", b)
		}
		if f, err := d.Fence(res); err != nil || f != (fence.State{Token: 3, Writer: "w3"}) {
			t.Fatalf("Fence(%q) = %+v, %v", res, f, err)
		}
	}
	names, err := filepath.Glob(filepath.Join(filepath.Dir(data), "*"))
	if err != nil || len(names) != 1 {
		t.Fatalf("the data directory holds %v (%v): temporary files left?", names, err)
	}
}
