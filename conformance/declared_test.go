package conformance

import (
	"net/url"
	"slices"
	"testing"
)

func TestMustDeclare(t *testing.T) {
	for _, variant := range []string{"expire", "setnx+expire"} {
		c := MustDeclare("redis+setnx://?variant=" + url.QueryEscape(variant))
		if !slices.Equal(c.Weaknesses, []Property{DeadlockFreedom, OwnerOnlyRelease}) {
			t.Errorf("variant %q: weaknesses %v", variant, c.Weaknesses)
		}
	}
	for _, bad := range []string{"nosuch://", "redis+setnx://?variant=x", "zk://?session_timeout=soon", "%zz"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("MustDeclare(%q) did not panic", bad)
				}
			}()
			MustDeclare(bad)
		}()
	}
}
