// Command dlock-etcd runs one etcd member, embedded (go.etcd.io/etcd/server/v3/embed),
// configured by the etcd command's own flags — the subset internal/servers passes, so
// that the same command line runs this binary on this machine and the etcd command in
// a container. It serves until SIGTERM or SIGINT, then stops gracefully (a leader
// hands leadership over first) and exits 0; it exits 1 when the member fails, 2 on a
// bad flag.
//
// internal/servers builds it on first use (go build -C lab -o <cache> ./cmd/dlock-etcd)
// and caches it; make deps builds it ahead. It exists so that the library's module
// needs no etcd server: only this lab module does.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() { os.Exit(run(os.Args[1:])) }

// run starts the member configured by args and serves until a signal; it returns the
// exit code.
func run(args []string) int {
	cfg, err := parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-etcd: %v\n", err)
		return 2
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-etcd: %v\n", err)
		return 1
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "dlock-etcd: %v\n", err)
		return 1
	case <-e.Server.StopNotify():
		fmt.Fprintln(os.Stderr, "dlock-etcd: the member stopped during start-up")
		return 1
	case <-term:
	}
	select {
	case <-term:
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "dlock-etcd: %v\n", err)
		e.Close()
		return 1
	case <-e.Server.StopNotify():
		fmt.Fprintln(os.Stderr, "dlock-etcd: the member stopped")
		return 1
	}
	e.Close()
	<-e.Server.StopNotify()
	return 0
}

// parse turns the etcd command's flags into the member's configuration.
func parse(args []string) (*embed.Config, error) {
	cfg := embed.NewConfig()
	fs := flag.NewFlagSet("dlock-etcd", flag.ContinueOnError)
	var listenClient, advertiseClient, listenPeer, advertisePeer, logOutputs string
	fs.StringVar(&cfg.Name, "name", cfg.Name, "member name")
	fs.StringVar(&cfg.Dir, "data-dir", cfg.Dir, "data directory")
	fs.StringVar(&listenClient, "listen-client-urls", "", "client URL to listen on")
	fs.StringVar(&advertiseClient, "advertise-client-urls", "", "client URL to advertise")
	fs.StringVar(&listenPeer, "listen-peer-urls", "", "peer URL to listen on")
	fs.StringVar(&advertisePeer, "initial-advertise-peer-urls", "", "peer URL to advertise")
	fs.StringVar(&cfg.InitialCluster, "initial-cluster", cfg.InitialCluster, "name=peer URL of every member")
	fs.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", cfg.InitialClusterToken, "the cluster's token")
	fs.StringVar(&cfg.ClusterState, "initial-cluster-state", cfg.ClusterState, "new or existing")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn, error")
	fs.StringVar(&logOutputs, "log-outputs", "stderr", "comma list: stderr, stdout or files")
	fs.BoolVar(&cfg.SocketOpts.ReuseAddress, "socket-reuse-address", false, "SO_REUSEADDR on the listeners")
	fs.UintVar(&cfg.BcryptCost, "bcrypt-cost", cfg.BcryptCost, "bcrypt cost of passwords")
	fs.StringVar(&cfg.ClientTLSInfo.CertFile, "cert-file", "", "client TLS certificate")
	fs.StringVar(&cfg.ClientTLSInfo.KeyFile, "key-file", "", "client TLS key")
	fs.StringVar(&cfg.ClientTLSInfo.TrustedCAFile, "trusted-ca-file", "", "CA of client certificates")
	fs.BoolVar(&cfg.ClientTLSInfo.ClientCertAuth, "client-cert-auth", false, "require client certificates")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, u := range []struct {
		flag, value string
		to          *[]url.URL
	}{
		{"listen-client-urls", listenClient, &cfg.ListenClientUrls},
		{"advertise-client-urls", advertiseClient, &cfg.AdvertiseClientUrls},
		{"listen-peer-urls", listenPeer, &cfg.ListenPeerUrls},
		{"initial-advertise-peer-urls", advertisePeer, &cfg.AdvertisePeerUrls},
	} {
		if u.value == "" {
			continue
		}
		parsed, err := url.Parse(u.value)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", u.flag, err)
		}
		*u.to = []url.URL{*parsed}
	}
	cfg.LogOutputs = strings.Split(logOutputs, ",")
	return cfg, nil
}
