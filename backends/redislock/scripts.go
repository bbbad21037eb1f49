package redislock

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts only this backend runs, beside the Go that runs them (ops_*.go):
// the fair mode (fair.lua), sets of keys (*_all.lua), semaphores and read-write locks
// (prim_*.lua; prim_waiters.lua goes in front of the two that keep waiters) and elections (campaign.lua). The mutex's own scripts are the ones
// redlock shares (backends/internal/redisops).
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

var (
	campaignScript    = script("campaign.lua")
	fairScript        = script("fair.lua")
	fairAllScript     = script("fair_all.lua")
	refreshAllScript  = script("refresh_all.lua")
	primAcquireScript = redis.NewScript(source("prim_waiters.lua") + source("prim_acquire.lua"))
	primRefreshScript = script("prim_refresh.lua")
	primReleaseScript = redis.NewScript(source("prim_waiters.lua") + source("prim_release.lua"))
)
