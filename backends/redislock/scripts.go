package redislock

import (
	"embed"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// The Lua scripts only this backend runs, beside the Go that runs them (ops_*.go):
// the fair mode (fair.lua), sets of keys (*_all.lua), semaphores and read-write locks
// (prim_*.lua) and elections (campaign.lua, resign.lua). The mutex's own scripts are
// the ones redlock shares (backends/internal/redisops); so is lib.lua
// (redisops.LuaLib), the functions the scripts share, which they start with.
//
//go:embed *.lua
var luaFiles embed.FS

// script loads the embedded Lua file name; a missing file is a build mistake.
func script(name string) *redis.Script { return redis.NewScript(source(name)) }

// source is the embedded Lua file name's text.
func source(name string) string {
	src, err := luaFiles.ReadFile(name)
	if err != nil {
		panic("redislock: " + err.Error())
	}
	return string(src)
}

// withLib is source(names...) after redisops.LuaLib: a script that uses its
// functions.
func withLib(names ...string) string {
	src := redisops.LuaLib
	for _, n := range names {
		src += source(n)
	}
	return src
}

var (
	campaignScript    = redis.NewScript(withLib("campaign.lua"))
	resignScript      = redis.NewScript(withLib("resign.lua"))
	fairScript        = redis.NewScript(fairSource)
	fairAllScript     = redis.NewScript(withLib("fair_all.lua"))
	refreshAllScript  = script("refresh_all.lua")
	primAcquireScript = redis.NewScript(withLib("prim_waiters.lua", "prim_acquire.lua"))
	primRefreshScript = script("prim_refresh.lua")
	primReleaseScript = redis.NewScript(withLib("prim_waiters.lua", "prim_release.lua"))
)
