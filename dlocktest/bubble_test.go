package dlocktest

import (
	"fmt"
	"runtime"
	"strings"
)

// bubbleGoroutines counts the goroutines of the calling goroutine's synctest
// bubble other than itself and testing/synctest's own, and returns their stacks.
func bubbleGoroutines() (int, string) {
	self := make([]byte, 256)
	self = self[:runtime.Stack(self, false)]
	header, _, _ := strings.Cut(string(self), "\n")
	id, _, _ := strings.Cut(header, " [")
	i := strings.Index(header, "synctest bubble ")
	if i < 0 {
		return 0, ""
	}
	bubble := header[i:]
	bubble = bubble[:strings.IndexAny(bubble, "]")]
	all := goroutineDump()
	n := 0
	var out []string
	for _, g := range strings.Split(all, "\n\n") {
		h, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(h, bubble+"]") || strings.HasPrefix(h, id+" ") {
			continue
		}
		if strings.Contains(g, "created by testing/synctest.") || strings.Contains(g, "created by testing.(*T).Run") {
			continue
		}
		n++
		out = append(out, g)
	}
	return n, fmt.Sprint(strings.Join(out, "\n\n"))
}

// goroutineDump is every goroutine's stack, for a leak.
func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
