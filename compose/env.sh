# Source this after `docker compose -f compose/docker-compose.yml up -d`:
#   . compose/env.sh
export DLOCK_REDIS_ADDRS=127.0.0.1:6379
export DLOCK_REDLOCK_ADDRS=127.0.0.1:6380,127.0.0.1:6381,127.0.0.1:6382,127.0.0.1:6383,127.0.0.1:6384
export DLOCK_MYSQL_DSN='root@tcp(127.0.0.1:3306)/?parseTime=true'
export DLOCK_ZK_ADDRS=127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183
export DLOCK_ETCD_ADDRS=127.0.0.1:2379,127.0.0.1:2479,127.0.0.1:2579
