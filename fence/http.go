package fence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// The headers of the HTTP guard. A client sends TokenHeader and WriterHeader with
// every write (SetHeader, Transport); Handler answers a refused write with 409
// Conflict, RefusedHeader (the Reason), FenceHeader (the resource's fence),
// TokenHeader (the token refused) and ResourceHeader (the resource, path-escaped).
const (
	TokenHeader    = "Dlock-Fence-Token"
	WriterHeader   = "Dlock-Fence-Writer"
	RefusedHeader  = "Dlock-Fence-Refused"
	FenceHeader    = "Dlock-Fence-Highest"
	ResourceHeader = "Dlock-Fence-Resource"
)

// Handler returns a handler that lets a request through to next only when g accepts
// the token and writer it carries (TokenHeader, WriterHeader) for its resource:
// resource(r), or the request's path when resource is nil. It answers itself:
//
//   - 409 Conflict when g refuses the token (ErrStale: 0, below the fence, or equal
//     from another writer), with RefusedHeader, FenceHeader, TokenHeader and
//     ResourceHeader set and the refusal in the body;
//   - 428 Precondition Required when a header is missing, 400 Bad Request when the
//     token is not a decimal uint64 or g finds the resource or writer invalid;
//   - 503 Service Unavailable when g's store fails (the body does not repeat the
//     store's error).
//
// When g has a guarded write that runs a function — Memory's Do — next runs inside
// it: no newer token is accepted for the resource until next returns, so next's
// write lands before any newer one. With another guard, next runs after g's Check,
// and a newer request may pass between the two: make next's own write through the
// guard's guarded write (the request's token and writer: FromContext) where writes
// to one resource can be concurrent.
//
// Handler guards every request it is given, reads included: put it in front of the
// writes.
func Handler(g Guard, resource func(r *http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, writer := r.Header.Get(TokenHeader), r.Header.Get(WriterHeader)
		if tok == "" || writer == "" {
			http.Error(w, fmt.Sprintf("fence: the request must carry the %s and %s headers", TokenHeader, WriterHeader), http.StatusPreconditionRequired)
			return
		}
		token, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("fence: %s is not a decimal token", TokenHeader), http.StatusBadRequest)
			return
		}
		name := r.URL.Path
		if resource != nil {
			name = resource(r)
		}
		r = r.WithContext(context.WithValue(r.Context(), grantKey{}, grant{token, writer}))
		if d, ok := g.(doer); ok {
			err = d.Do(r.Context(), name, token, writer, func() error { next.ServeHTTP(w, r); return nil })
		} else if err = g.Check(r.Context(), name, token, writer); err == nil {
			next.ServeHTTP(w, r)
		}
		var stale *StaleError
		switch {
		case err == nil:
		case errors.As(err, &stale):
			w.Header().Set(RefusedHeader, string(stale.Reason))
			w.Header().Set(FenceHeader, strconv.FormatUint(stale.Fence, 10))
			w.Header().Set(TokenHeader, strconv.FormatUint(stale.Token, 10))
			w.Header().Set(ResourceHeader, url.PathEscape(stale.Resource))
			http.Error(w, stale.Error(), http.StatusConflict)
		case errors.Is(err, ErrInvalid):
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			http.Error(w, "fence: the guard could not decide (its store failed)", http.StatusServiceUnavailable)
		}
	})
}

// doer is a guard whose guarded write runs a function (Memory).
type doer interface {
	Do(ctx context.Context, resource string, token uint64, writer string, fn func() error) error
}

type grantKey struct{}

type grant struct {
	token  uint64
	writer string
}

// FromContext returns the token and writer of the request that Handler let through
// with ctx (its request's context), for next's own guarded write; ok is false for a
// context Handler did not make.
func FromContext(ctx context.Context) (token uint64, writer string, ok bool) {
	g, ok := ctx.Value(grantKey{}).(grant)
	return g.token, g.writer, ok
}

// SetHeader sets the token and writer of a grant on h (a request's header).
func SetHeader(h http.Header, token uint64, writer string) {
	h.Set(TokenHeader, strconv.FormatUint(token, 10))
	h.Set(WriterHeader, writer)
}

// Transport is an http.RoundTripper that sends one grant's token and writer with
// every request (on a copy: the request is not modified), through Base
// (http.DefaultTransport when nil). Use one per lease.
type Transport struct {
	Base   http.RoundTripper
	Token  uint64
	Writer string
}

// RoundTrip sends a copy of r with the grant's headers set.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	r2 := r.Clone(r.Context())
	SetHeader(r2.Header, t.Token, t.Writer)
	return base.RoundTrip(r2)
}

// StaleResponse returns the refusal that resp carries when it is Handler's 409
// Conflict (a *StaleError, errors.Is ErrStale), and nil for any other response. The
// caller still closes resp.Body.
func StaleResponse(resp *http.Response) error {
	reason := resp.Header.Get(RefusedHeader)
	if resp.StatusCode != http.StatusConflict || reason == "" {
		return nil
	}
	e := &StaleError{Reason: Reason(reason)}
	e.Fence, _ = strconv.ParseUint(resp.Header.Get(FenceHeader), 10, 64)
	e.Token, _ = strconv.ParseUint(resp.Header.Get(TokenHeader), 10, 64)
	e.Resource, _ = url.PathUnescape(resp.Header.Get(ResourceHeader))
	return e
}
