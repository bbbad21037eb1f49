package fence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/fence"
)

// A holder whose lease ended while it was paused writes after the next holder: the
// guard refuses its write.
func Example() {
	ctx := context.Background()
	store := memlock.NewStore()
	a, b := memlock.New(memlock.WithStore(store)), memlock.New(memlock.WithStore(store))
	defer a.Close()
	defer b.Close()
	guard := fence.NewMemory()
	var invoice string
	write := func(ls dlock.Lease, writer, body string) error {
		return guard.Do(ctx, "invoices/42", ls.Token(), writer, func() error { invoice = body; return nil })
	}

	old, _ := a.Acquire(ctx, "invoices/42", dlock.WithTTL(50*time.Millisecond))
	oldWriter := fence.NewWriter() // one per grant
	<-old.Done()                   // paused past its TTL

	next, _ := b.Acquire(ctx, "invoices/42", dlock.WithTTL(time.Minute))
	defer next.Release(ctx)
	fmt.Println(write(next, fence.NewWriter(), "paid"))

	err := write(old, oldWriter, "open") // the paused holder wakes up and writes
	fmt.Println(errors.Is(err, fence.ErrStale), invoice)
	// Output:
	// <nil>
	// true paid
}

// The rule itself, for a guard of your own: keep a State per resource, and replace
// it with Admit's result atomically with the write.
func ExampleState_Admit() {
	var s fence.State
	s, err := s.Admit("invoices/42", 7, "grant-a")
	fmt.Println(s.Token, err)
	_, err = s.Admit("invoices/42", 6, "grant-b")
	fmt.Println(err)
	_, err = s.Admit("invoices/42", 7, "grant-b")
	fmt.Println(err)
	_, err = s.Admit("invoices/42", 0, "grant-c")
	fmt.Println(err)
	// Output:
	// 7 <nil>
	// fence: "invoices/42" refused token 6: it has accepted token 7 (a newer grant wrote)
	// fence: "invoices/42" refused token 7 from another writer than the one it accepted it from (the token was handed out twice)
	// fence: "invoices/42" refused token 0 (a lock without fencing tokens)
}

// An HTTP service behind Handler: a client sends its grant with Transport, and reads
// a refusal (409 Conflict) back with StaleResponse.
func ExampleHandler() {
	store := fence.NewMemory() // one server; a shared store (sqlfence, redisfence, etcdfence) for several
	srv := httptest.NewServer(fence.Handler(store, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "stored")
	})))
	defer srv.Close()

	put := func(token uint64, writer string) {
		c := &http.Client{Transport: &fence.Transport{Token: token, Writer: writer}}
		resp, err := c.Post(srv.URL+"/invoices/42", "text/plain", strings.NewReader("paid"))
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		if err := fence.StaleResponse(resp); err != nil {
			fmt.Println(resp.StatusCode, err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		fmt.Print(resp.StatusCode, " ", string(body))
	}
	put(8, "grant-b")
	put(7, "grant-a")
	// Output:
	// 200 stored
	// 409 fence: "/invoices/42" refused token 7: it has accepted token 8 (a newer grant wrote)
}
