package getlockpeer

import (
	"context"
	"database/sql"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerurl"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+getlock://user:password@host:port[/database]. It takes no query parameters.
// The opener pings the server; the Locker's Close closes the *sql.DB it made.
const Scheme = "peer+getlock"

func init() {
	dlock.Register(Scheme, func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		if err := dlock.CheckQuery(u); err != nil {
			return nil, err
		}
		hosts, err := peerurl.Hosts(u)
		if err != nil {
			return nil, err
		}
		if len(hosts) != 1 {
			return nil, peerurl.OneHost(u)
		}
		cfg := mysql.NewConfig()
		cfg.Net, cfg.Addr = "tcp", hosts[0]
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.DBName = strings.Trim(u.Path, "/")
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(connector)
		if err := peerurl.Ping(ctx, Scheme, db.PingContext, db.Close); err != nil {
			return nil, err
		}
		return peerurl.Owning(New(db), db.Close), nil
	})
}
