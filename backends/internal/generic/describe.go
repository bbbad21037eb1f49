package generic

import (
	"context"
	"encoding/json"
	"maps"
	"slices"

	"github.com/dlock-go/dlock/driver"
)

// DescribeAll returns the states describe gives for each of names, in the names'
// order: what a driver's List returns once it has found the names under a prefix.
// It stops at describe's first error and returns it.
func DescribeAll(ctx context.Context, names map[string]bool, describe func(context.Context, string) ([]driver.KeyState, error)) ([]driver.KeyState, error) {
	var out []driver.KeyState
	for _, name := range slices.Sorted(maps.Keys(names)) {
		states, err := describe(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, states...)
	}
	return out, nil
}

// HolderRecord returns the JSON of the holder record ctx carries
// (driver.HolderFrom), nil if it carries none: what a driver writes where its store
// keeps the record apart from the claim (a side table).
func HolderRecord(ctx context.Context) []byte {
	if h, ok := driver.HolderFrom(ctx); ok {
		b, _ := json.Marshal(h)
		return b
	}
	return nil
}
