package fence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestAdmit: the rule of docs/fencing.md, case by case: token 0 refused always; a
// larger token accepted (and remembered with its writer); a smaller one refused; an
// equal one accepted from the writer that presented it and refused from another.
// Refusals are *StaleError (errors.Is ErrStale) and never print the writer.
func TestAdmit(t *testing.T) {
	const secret = "writer-7c1d"
	s7 := fence.State{Token: 7, Writer: secret}
	for _, c := range []struct {
		name   string
		state  fence.State
		token  uint64
		writer string
		want   fence.State
		reason fence.Reason // "" accepted
	}{
		{"first write", fence.State{}, 1, "w", fence.State{Token: 1, Writer: "w"}, ""},
		{"token 0 on an empty resource", fence.State{}, 0, "w", fence.State{}, fence.ZeroToken},
		{"token 0 after others", s7, 0, secret, s7, fence.ZeroToken},
		{"larger token", s7, 8, "other", fence.State{Token: 8, Writer: "other"}, ""},
		{"smaller token", s7, 6, secret, s7, fence.BelowFence},
		{"equal token, same writer", s7, 7, secret, s7, ""},
		{"equal token, other writer", s7, 7, "other", s7, fence.OtherWriter},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.state.Admit("inv/42", c.token, c.writer)
			if got != c.want {
				t.Errorf("state after: %+v, want %+v", got, c.want)
			}
			if c.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var stale *fence.StaleError
			if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("want a *StaleError, got %v", err)
			}
			if stale.Reason != c.reason || stale.Resource != "inv/42" || stale.Token != c.token {
				t.Fatalf("refusal %+v, want reason %s for token %d of inv/42", *stale, c.reason, c.token)
			}
			if c.reason != fence.ZeroToken && stale.Fence != c.state.Token {
				t.Fatalf("refusal's fence %d, want %d", stale.Fence, c.state.Token)
			}
			if msg := err.Error(); strings.Contains(msg, secret) || !strings.Contains(msg, "inv/42") {
				t.Fatalf("the refusal %q must name the resource and not the writer", msg)
			}
		})
	}
}

// TestValidate: what no guard accepts is ErrInvalid, named without the writer.
func TestValidate(t *testing.T) {
	long := strings.Repeat("x", fence.MaxLen+1)
	for _, c := range []struct{ resource, writer string }{
		{"", "w"}, {long, "w"}, {"\xff", "w"}, {"r", ""}, {"r", long}, {"r", "\xffsecret"},
	} {
		err := fence.Validate(c.resource, 1, c.writer)
		if !errors.Is(err, fence.ErrInvalid) || errors.Is(err, fence.ErrStale) {
			t.Errorf("Validate(%q, 1, %q) = %v, want ErrInvalid", c.resource, c.writer, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error %q prints the writer", err)
		}
		if _, err := (fence.State{}).Admit(c.resource, 1, c.writer); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Admit(%q, 1, %q) = %v, want ErrInvalid", c.resource, c.writer, err)
		}
	}
	if err := fence.Validate(strings.Repeat("é", fence.MaxLen/2), 1, "w"); err != nil {
		t.Errorf("a resource of %d bytes: %v", fence.MaxLen-1, err)
	}
}

func TestNewWriter(t *testing.T) {
	a, b := fence.NewWriter(), fence.NewWriter()
	if a == b || len(a) != 32 {
		t.Fatalf("NewWriter: %q, %q: want two different 32-digit values", a, b)
	}
}

// memLockers returns two clients of one in-process lock space.
func memLockers(t *testing.T) (a, b dlock.Locker) {
	s := memlock.NewStore()
	a, b = memlock.New(memlock.WithStore(s)), memlock.New(memlock.WithStore(s))
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// values is a resource's data as the tests' guarded writes leave it.
type values struct {
	mu sync.Mutex
	m  map[string]string
}

func (v *values) set(resource, value string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[string]string{}
	}
	v.m[resource] = value
}

func (v *values) get(_ context.Context, resource string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.m[resource]
}

func TestMain(m *testing.M) { servertest.Main(m) }
