package fence_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/fencetest"
)

// guardedServer is a real net/http server on loopback whose PUT /<resource>
// stores the body, behind Handler with g (fencetest.HTTPGuard).
func guardedServer(t *testing.T, g fence.Guard, v *values) *fencetest.HTTPGuard {
	return fencetest.NewHTTPGuard(t, g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if tok, writer, ok := fence.FromContext(r.Context()); !ok || tok == 0 || writer == "" {
			http.Error(w, "no grant in the request's context", http.StatusInternalServerError)
			return
		}
		v.set(fencetest.HTTPResource(r), string(body))
		w.WriteHeader(http.StatusNoContent)
	}))
}

// TestHandlerLateWrite: through a real HTTP server, a stale holder's late PUT gets
// 409 Conflict, and the client sees it as the guard's refusal.
func TestHandlerLateWrite(t *testing.T) {
	a, b := memLockers(t)
	v := &values{}
	srv := guardedServer(t, fence.NewMemory(), v)
	fencetest.LateWrite(t, a, b, "invoices/42", 100*time.Millisecond, srv.Put, v.get)
}

// TestHandlerConcurrent: with Memory (whose Do runs the handler under the fence),
// concurrent PUTs end with the largest token's body.
func TestHandlerConcurrent(t *testing.T) {
	v := &values{}
	srv := guardedServer(t, fence.NewMemory(), v)
	fencetest.Concurrent(t, "r", 30, srv.Put, v.get)
}

// checkOnly is a guard without Memory's Do: Handler checks, then runs the handler.
type checkOnly struct{ fence.Guard }

// TestHandlerAnswers: the status of every kind of request Handler answers itself,
// with a guard that has no Do.
func TestHandlerAnswers(t *testing.T) {
	v := &values{}
	srv := guardedServer(t, checkOnly{fence.NewMemory()}, v).Server()
	put := func(h map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/r%C3%A9s", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		for k, val := range h {
			req.Header.Set(k, val)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		name string
		h    map[string]string
		want int
	}{
		{"no headers", nil, http.StatusPreconditionRequired},
		{"no writer", map[string]string{fence.TokenHeader: "5"}, http.StatusPreconditionRequired},
		{"no token", map[string]string{fence.WriterHeader: "w"}, http.StatusPreconditionRequired},
		{"malformed token", map[string]string{fence.TokenHeader: "-1", fence.WriterHeader: "w"}, http.StatusBadRequest},
		{"token 0", map[string]string{fence.TokenHeader: "0", fence.WriterHeader: "w"}, http.StatusConflict},
		{"token 5", map[string]string{fence.TokenHeader: "5", fence.WriterHeader: "w"}, http.StatusNoContent},
		{"token 5 again", map[string]string{fence.TokenHeader: "5", fence.WriterHeader: "w"}, http.StatusNoContent},
		{"token 5, another writer", map[string]string{fence.TokenHeader: "5", fence.WriterHeader: "w2"}, http.StatusConflict},
		{"token 4", map[string]string{fence.TokenHeader: "4", fence.WriterHeader: "w"}, http.StatusConflict},
	} {
		resp := put(c.h)
		if resp.StatusCode != c.want {
			t.Errorf("%s: %s, want %d", c.name, resp.Status, c.want)
		}
		err := fence.StaleResponse(resp)
		if (c.want == http.StatusConflict) != errors.Is(err, fence.ErrStale) {
			t.Errorf("%s: StaleResponse = %v", c.name, err)
		}
	}
	resp := put(map[string]string{fence.TokenHeader: "4", fence.WriterHeader: "w"})
	var stale *fence.StaleError
	if !errors.As(fence.StaleResponse(resp), &stale) || *stale != (fence.StaleError{Resource: "rés", Token: 4, Reason: fence.BelowFence, Fence: 5}) {
		t.Fatalf("StaleResponse of a refused token 4 after 5: %+v", stale)
	}
	if got := v.get(context.Background(), "rés"); got != "x" {
		t.Fatalf("the accepted PUT stored %q", got)
	}
}

// TestTransportLeavesTheRequest: Transport sets the headers on a copy.
func TestTransportLeavesTheRequest(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	c := &http.Client{Transport: &fence.Transport{Base: srv.Client().Transport, Token: 9, Writer: "w"}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Get(fence.TokenHeader) != "9" || got.Get(fence.WriterHeader) != "w" {
		t.Fatalf("the server got %v", got)
	}
	if len(req.Header) != 0 {
		t.Fatalf("Transport modified the caller's request: %v", req.Header)
	}
}
