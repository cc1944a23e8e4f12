#!/usr/bin/env bash
# Private store instances on loopback for distlock's tests and benchmarks.
#
#   scripts/services.sh up|down|status [service…]   services: redis redlock zk zk-ensemble zk-netns postgres mysql etcd etcd-cluster
#     redis-tls postgres-tls mysql-tls etcd-secure redis-sentinel redis-cluster
#   scripts/services.sh stop-one NAME | start-one NAME | pid NAME   (NAME: redis-17003, zk-12282, etcd-12489, …)
#   scripts/services.sh netns-cut A B | netns-heal A B   (cut / heal zk-netns members A and B)
#   (stop-one/start-one/pid also take zkns-N, a zk-netns member)
#
# DISTLOCK_SERVICES_SET=chaos selects a second, independent set of instances for the random
# fault schedule (`scripts/chaos.sh --random --services chaos`), which kills and pauses its
# stores: every port +1000 (Redis 17379/17380, Redlock 18001-18005, ZooKeeper 13181, ensemble
# 13281-13283, PostgreSQL 16432, MariaDB 14306, etcd 13379 and cluster 13479/13489/13499), data under ${DIR}-chaos, and its namespace
# ensemble in dl-zkc1..3 on 10.231.1.0/24 (bridge dlbrc0). Unset (or `default`): the set below.
#
# Installs missing Debian packages, keeps every instance's data under
# ${DISTLOCK_SERVICES_DIR:-/tmp/distlock-services}, binds 127.0.0.1 only, waits until each
# answers, and is idempotent. Ports: Redis 16379 (+ a read-only replica on 16380), Redlock
# 17001-17005, ZooKeeper 12181 and an ensemble on 12281-12283, PostgreSQL 15432 (trust auth, plus
# role distlock_pw / password distlock-pw that must authenticate; the same user exists on every
# Redis), MariaDB 13306, etcd 12379 (peer 12380) and a 3-member etcd cluster on client ports
# 12479, 12489, 12499 (peers 12480, 12490, 12500), and redis-py in a venv under $DIR/redis-py (the
# interop partner of distlock-redis/tests/redis_py.rs and a bench peer), a Sentinel set (master
# 16400, replicas 16401-16402, sentinels 26400-26402, master name `distlock`) and a Redis
# Cluster (16410-16415, three primaries with a replica each). `up` also installs protoc
# (protobuf-compiler), which distlock-etcd's build needs (scripts/test.sh builds --all-features).
set -euo pipefail

DIR="${DISTLOCK_SERVICES_DIR:-/tmp/distlock-services}"
REDIS_PORT=16379
REDIS_REPLICA_PORT=16380   # a read-only replica of 16379, for the -READONLY test
REDLOCK_PORTS=(17001 17002 17003 17004 17005)
ZK_PORT=12181
ZK_ENSEMBLE_PORTS=(12281 12282 12283)
ZK_TLS_PORT=12191                        # the standalone ZooKeeper's TLS port (client certificates)
PG_PORT=15432
MYSQL_PORT=13306
ETCD_PORT=12379                          # peer port: client port + 1
ETCD_CLUSTER_PORTS=(12479 12489 12499)   # peers 12480, 12490, 12500
REDIS_TLS_PORT=16390                     # TLS only, ACL user + password
PG_TLS_PORT=15433                        # PostgreSQL that requires TLS
MYSQL_TLS_PORT=13307                     # MariaDB that requires TLS
ETCD_SECURE_PORT=12579                   # TLS + authentication (peer 12580)
SENTINEL_REDIS_PORTS=(16400 16401 16402) # Sentinel-managed: master, two replicas
SENTINEL_PORTS=(26400 26401 26402)       # the sentinels watching master set "distlock"
CLUSTER_PORTS=(16410 16411 16412 16413 16414 16415) # Redis Cluster: 3 primaries, 3 replicas
WAIT_SECS="${DISTLOCK_SERVICES_WAIT:-90}"
# The zk-netns ensemble: namespaces $NETNS_PREFIX1..3 on $NETNS_NET.0/24, bridge $NETNS_BRIDGE.
NETNS_NET=10.231.0
NETNS_PREFIX=dl-zk
NETNS_BRIDGE=dlbr0
NETNS_VETH=dlz

log() { echo "services: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

case "${DISTLOCK_SERVICES_SET:-default}" in
  default) ;;
  chaos)
    DIR="$DIR-chaos"
    REDIS_PORT=17379; REDIS_REPLICA_PORT=17380
    REDLOCK_PORTS=(18001 18002 18003 18004 18005)
    ZK_PORT=13181; ZK_ENSEMBLE_PORTS=(13281 13282 13283); ZK_TLS_PORT=13191
    PG_PORT=16432; MYSQL_PORT=14306
    REDIS_TLS_PORT=17390; PG_TLS_PORT=16433; MYSQL_TLS_PORT=14307; ETCD_SECURE_PORT=13579
    SENTINEL_REDIS_PORTS=(17400 17401 17402); SENTINEL_PORTS=(27400 27401 27402)
    CLUSTER_PORTS=(17410 17411 17412 17413 17414 17415)
    ETCD_PORT=13379; ETCD_CLUSTER_PORTS=(13479 13489 13499)
    NETNS_NET=10.231.1; NETNS_PREFIX=dl-zkc; NETNS_BRIDGE=dlbrc0; NETNS_VETH=dlzc ;;
  *) die "unknown DISTLOCK_SERVICES_SET '${DISTLOCK_SERVICES_SET}' (known: default, chaos)" ;;
esac

mkdir -p "$DIR"
chmod 0755 "$DIR"

# --- packages -------------------------------------------------------------------------------
APT_UPDATED=0
ensure_pkg() { # ensure_pkg BINARY PACKAGE
  local bin=$1 pkg=$2
  if [ -x "$bin" ] || command -v "$bin" >/dev/null 2>&1; then return 0; fi
  case "$bin" in *.jar) [ -f "$bin" ] && return 0 ;; esac
  log "installing $pkg (for $bin)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q "$pkg" >"$DIR/apt-$pkg.log" 2>&1; then
    if [ "$APT_UPDATED" = 0 ]; then
      apt-get update -q >"$DIR/apt-update.log" 2>&1 || true
      APT_UPDATED=1
    fi
    apt-get install -y -q "$pkg" >"$DIR/apt-$pkg.log" 2>&1 || die "apt-get install $pkg failed (see $DIR/apt-$pkg.log)"
  fi
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

# --- helpers ---------------------------------------------------------------------------------
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
pidof_file() { [ -f "$1" ] && cat "$1" 2>/dev/null || true; }
# ours PID TEXT: PID is alive and its command line holds TEXT (its config path, its port). A pid
# file outlives its process, and with pid_max at 32768 a long day of builds and tests hands that
# pid to another process: that one is neither "our instance, already up" nor ours to kill.
ours() { alive "${1:-}" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"; }
# resumed PID: wakes an instance that a fault test paused (SIGSTOP) and could not resume because
# the run ended first; a paused store is alive but answers nothing.
resumed() { kill -CONT "$1" 2>/dev/null || true; }

wait_until() { # wait_until DESCRIPTION LOGFILE COMMAND…
  local what=$1 logf=$2; shift 2
  local deadline=$((SECONDS + WAIT_SECS))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      [ -f "$logf" ] && tail -n 25 "$logf" | sed 's/^/  | /' >&2
      die "$what did not answer within ${WAIT_SECS}s; see $logf"
    fi
    sleep 0.2
  done
}

tcp_say() { # tcp_say PORT WORD [HOST] -> prints the answer of a ZooKeeper four-letter word
  python3 - "$1" "$2" "${3:-127.0.0.1}" <<'EOF'
import socket, sys
try:
    s = socket.create_connection((sys.argv[3], int(sys.argv[1])), timeout=2)
    s.sendall(sys.argv[2].encode()); s.shutdown(socket.SHUT_WR)
    out = b""
    while True:
        b = s.recv(4096)
        if not b: break
        out += b
    sys.stdout.write(out.decode(errors="replace"))
except Exception:
    sys.exit(1)
EOF
}

# --- Redis -----------------------------------------------------------------------------------
redis_pidfile() { echo "$DIR/redis-$1/redis.pid"; }
redis_ok() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = "PONG" ]; }
redis_start() {
  local port=$1 d="$DIR/redis-$1"
  ensure_pkg redis-server redis-server
  mkdir -p "$d"
  local pid; pid=$(pidof_file "$(redis_pidfile "$port")")
  if ours "$pid" ":$port"; then
    resumed "$pid"
    if redis_ok "$port"; then redis_acl "$port"; return 0; fi
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$(redis_pidfile "$port")"
  local extra=("${@:2}")
  [ "$port" = "$REDIS_REPLICA_PORT" ] && extra=(--replicaof 127.0.0.1 "$REDIS_PORT")
  # A cluster node (also from `start-one`: it rejoins with its nodes.conf).
  [[ " ${CLUSTER_PORTS[*]} " == *" $port "* ]] &&
    extra=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --pidfile "$(redis_pidfile "$port")" --logfile "$d/redis.log" --dir "$d" \
    --maxclients 4000 "${extra[@]}" >/dev/null
  wait_until "redis on $port" "$d/redis.log" redis_ok "$port"
  redis_acl "$port"
}
redis_py_venv() { # redis-py in a venv: the interop partner (distlock-redis/tests/redis_py.rs) and a bench peer
  local v="$DIR/redis-py"
  if [ -x "$v/bin/python" ] && "$v/bin/python" -c 'import redis' 2>/dev/null; then return 0; fi
  ensure_pkg python3 python3
  python3 -c 'import venv, ensurepip' 2>/dev/null || ensure_pkg /usr/share/doc/python3-venv python3-venv
  log "making the redis-py venv in $v"
  python3 -m venv "$v" >"$DIR/redis-py-venv.log" 2>&1 || die "python3 -m venv failed (see $DIR/redis-py-venv.log)"
  "$v/bin/pip" install -q 'redis>=5,<7' >>"$DIR/redis-py-venv.log" 2>&1 || die "pip install redis failed (see $DIR/redis-py-venv.log)"
}
redis_acl() { # A user that must give its password (the default has none), for the bad-input tests.
  redis-cli -h 127.0.0.1 -p "$1" acl setuser distlock_pw on '>distlock-pw' '~*' '&*' '+@all' >/dev/null
}
redis_stop() {
  local pid; pid=$(pidof_file "$(redis_pidfile "$1")")
  if ours "$pid" ":$1"; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$(redis_pidfile "$1")"
}

# --- Redis Sentinel: a master, two replicas and three sentinels (quorum 2) ------------------
# A failover is noticed within 1 s (down-after-milliseconds). `up` keeps a healthy deployment as
# it is (its master may have moved); if any of the six is down, all six start again from fresh
# configuration files, the master on the first port.
sentinel_dir() { echo "$DIR/sentinel-$1"; }
sentinel_ok() { redis-cli -h 127.0.0.1 -p "$1" sentinel get-master-addr-by-name distlock 2>/dev/null | grep -q '^[0-9]'; }
sentinel_all_ok() {
  local p; for p in "${SENTINEL_REDIS_PORTS[@]}"; do redis_ok "$p" || return 1; done
  for p in "${SENTINEL_PORTS[@]}"; do sentinel_ok "$p" || return 1; done
  # The master is one of the set and every replica is linked to it.
  local m; m=$(redis-cli -p "${SENTINEL_PORTS[0]}" sentinel get-master-addr-by-name distlock 2>/dev/null | sed -n 2p)
  [ "$(redis-cli -p "$m" info replication 2>/dev/null | grep -c '^slave[0-9].*state=online')" = 2 ]
}
sentinel_stop_all() {
  local p pid
  for p in "${SENTINEL_PORTS[@]}"; do
    pid=$(pidof_file "$(sentinel_dir "$p")/sentinel.pid")
    if ours "$pid" ":$p"; then kill -9 "$pid" 2>/dev/null || true; fi
    rm -f "$(sentinel_dir "$p")/sentinel.pid"
  done
  for p in "${SENTINEL_REDIS_PORTS[@]}"; do redis_stop "$p"; done
}
sentinel_up() {
  ensure_pkg redis-server redis-server
  local p
  for p in "${SENTINEL_REDIS_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do
    local pid; pid=$(pidof_file "$(redis_pidfile "$p")"); [ -n "$pid" ] && resumed "$pid"
    pid=$(pidof_file "$(sentinel_dir "$p")/sentinel.pid"); [ -n "$pid" ] && resumed "$pid"
  done
  sentinel_all_ok && return 0
  sentinel_stop_all
  for p in "${SENTINEL_REDIS_PORTS[@]}"; do rm -f "$DIR/redis-$p/dump.rdb"; done
  local master=${SENTINEL_REDIS_PORTS[0]}
  redis_start "$master"
  for p in "${SENTINEL_REDIS_PORTS[@]:1}"; do redis_start "$p" --replicaof 127.0.0.1 "$master"; done
  for p in "${SENTINEL_PORTS[@]}"; do
    local d; d=$(sentinel_dir "$p"); mkdir -p "$d"
    cat >"$d/sentinel.conf" <<CONF
port $p
bind 127.0.0.1
daemonize yes
pidfile $d/sentinel.pid
logfile $d/sentinel.log
dir $d
sentinel monitor distlock 127.0.0.1 $master 2
sentinel down-after-milliseconds distlock 1000
sentinel failover-timeout distlock 5000
sentinel parallel-syncs distlock 2
CONF
    redis-server "$d/sentinel.conf" --sentinel >/dev/null
  done
  for p in "${SENTINEL_PORTS[@]}"; do wait_until "sentinel on $p" "$(sentinel_dir "$p")/sentinel.log" sentinel_ok "$p"; done
  wait_until "the sentinel set's replicas" "$(sentinel_dir "${SENTINEL_PORTS[0]}")/sentinel.log" sentinel_all_ok
}

# --- Redis Cluster: six nodes, three primaries with a replica each -----------------------------
# `up` keeps a cluster whose state is ok; otherwise every node starts again empty and the
# cluster is created anew (`redis-cli --cluster create`).
cluster_ok() {
  local p; for p in "${CLUSTER_PORTS[@]}"; do
    redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
  [ "$(redis-cli -p "${CLUSTER_PORTS[0]}" cluster nodes 2>/dev/null | grep -c master)" = 3 ]
}
cluster_up() {
  ensure_pkg redis-server redis-server
  local p pid
  for p in "${CLUSTER_PORTS[@]}"; do pid=$(pidof_file "$(redis_pidfile "$p")"); [ -n "$pid" ] && resumed "$pid"; done
  cluster_ok && return 0
  # A replica keeps what it synced in dump.rdb; loaded again, it makes the node "not empty".
  for p in "${CLUSTER_PORTS[@]}"; do redis_stop "$p"; rm -f "$DIR/redis-$p/nodes.conf" "$DIR/redis-$p/dump.rdb"; done
  for p in "${CLUSTER_PORTS[@]}"; do
    redis_start "$p"
  done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${CLUSTER_PORTS[@]}") --cluster-replicas 1 --cluster-yes \
    >"$DIR/redis-cluster-create.log" 2>&1 || die "redis-cli --cluster create failed (see $DIR/redis-cluster-create.log)"
  wait_until "the Redis cluster" "$DIR/redis-cluster-create.log" cluster_ok
}
cluster_down() { local p; for p in "${CLUSTER_PORTS[@]}"; do redis_stop "$p"; done; }

# --- TLS: a private CA and certificates (openssl) -------------------------------------------
# $TLS/ca.crt signs server.crt (for DNS name `localhost` only, so a client that dials 127.0.0.1
# sees a certificate for another host), client.crt (CN `distlock`), and expired-client.crt
# (valid for one day in 2020). other-ca.crt is a CA nobody uses: the wrong CA for the tests.
TLS="$DIR/tls"
tls_cert() { # tls_cert NAME SUBJECT EXTFILE_LINE [openssl ca dates…]
  local name=$1 subj=$2 ext=$3; shift 3
  openssl req -new -newkey rsa:2048 -nodes -keyout "$TLS/$name.key" -subj "$subj" -out "$TLS/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$TLS/$name.ext"
  if [ $# -gt 0 ]; then
    openssl ca -batch -config "$TLS/ca.cnf" -notext -extfile "$TLS/$name.ext" -in "$TLS/$name.csr" -out "$TLS/$name.crt" "$@" >/dev/null 2>&1
  else
    openssl x509 -req -in "$TLS/$name.csr" -CA "$TLS/ca.crt" -CAkey "$TLS/ca.key" -CAcreateserial -days 3650 \
      -extfile "$TLS/$name.ext" -out "$TLS/$name.crt" 2>/dev/null
  fi
  chmod 0644 "$TLS/$name.key" "$TLS/$name.crt"
}
tls_up() {
  tls_make
  # ZooKeeper's digest scheme needs nothing on the server: any user:password authenticates,
  # and the ACLs of the nodes it creates name that identity.
  printf 'distlock-zk-pw\n' >"$TLS/zk-password"
}
tls_make() {
  ensure_pkg openssl openssl
  [ -f "$TLS/done" ] && return 0
  rm -rf "$TLS"; mkdir -p "$TLS"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TLS/ca.key" -subj "/CN=distlock test CA" -days 3650 -out "$TLS/ca.crt" 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TLS/other-ca.key" -subj "/CN=another CA" -days 3650 -out "$TLS/other-ca.crt" 2>/dev/null
  tls_cert server "/CN=localhost" "subjectAltName=DNS:localhost"
  tls_cert client "/CN=distlock" "extendedKeyUsage=clientAuth"
  : >"$TLS/index.txt"; echo 1000 >"$TLS/serial"
  cat >"$TLS/ca.cnf" <<CNF
[ca]
default_ca = private
[private]
dir = $TLS
database = $TLS/index.txt
serial = $TLS/serial
new_certs_dir = $TLS
certificate = $TLS/ca.crt
private_key = $TLS/ca.key
default_md = sha256
policy = any
[any]
commonName = supplied
CNF
  tls_cert expired-client "/CN=distlock" "extendedKeyUsage=clientAuth" -startdate 20200101000000Z -enddate 20200102000000Z
  [ -s "$TLS/expired-client.crt" ] || die "could not make the expired certificate (openssl ca)"
  touch "$TLS/done"
}

# --- Redis over TLS, with an ACL user and password --------------------------------------------
redis_tls_cli() { redis-cli --tls --cacert "$TLS/ca.crt" --sni localhost -h 127.0.0.1 -p "$REDIS_TLS_PORT" "$@"; }
redis_tls_ok() { [ "$(redis_tls_cli --user distlock --pass distlock-tls-pw --no-auth-warning ping 2>/dev/null)" = "PONG" ]; }
redis_tls_up() {
  tls_up
  ensure_pkg redis-server redis-server
  local d="$DIR/redis-$REDIS_TLS_PORT"; mkdir -p "$d"
  local pid; pid=$(pidof_file "$(redis_pidfile "$REDIS_TLS_PORT")")
  if ours "$pid" ":$REDIS_TLS_PORT"; then
    resumed "$pid"; redis_tls_ok && return 0
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$(redis_pidfile "$REDIS_TLS_PORT")"
  # `default` is off: every client authenticates as `distlock`; client certificates are checked
  # when given (optional), so the tests can show one that expired being refused.
  printf 'distlock-tls-pw\n' >"$TLS/redis-password"
  cat >"$d/users.acl" <<ACL
user default off
user distlock on >distlock-tls-pw ~* &* +@all
ACL
  redis-server --port 0 --tls-port "$REDIS_TLS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --tls-cert-file "$TLS/server.crt" --tls-key-file "$TLS/server.key" --tls-ca-cert-file "$TLS/ca.crt" \
    --tls-auth-clients optional --aclfile "$d/users.acl" \
    --pidfile "$(redis_pidfile "$REDIS_TLS_PORT")" --logfile "$d/redis.log" --dir "$d" >/dev/null
  wait_until "redis (TLS) on $REDIS_TLS_PORT" "$d/redis.log" redis_tls_ok
}

# --- ZooKeeper -------------------------------------------------------------------------------
ZK_HOME=/usr/share/zookeeper
zk_dir() { echo "$DIR/zk-$1"; }
# Debian's zookeeper.jar logs through slf4j with no binding (it prints nothing); slf4j-simple, when
# present, sends warnings and errors (a peer it cannot reach, an election going round) to zk.out.
zk_classpath() {
  local cp="/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
  [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
  # The TLS port's Netty factory needs netty-codec, which zookeeper.jar's manifest leaves out
  # (Debian's libnetty-java, a dependency of zookeeper, has it).
  [ -f /usr/share/java/netty-codec.jar ] && cp="$cp:/usr/share/java/netty-codec.jar"
  echo "$cp"
}
zk_write_cfg() { # zk_write_cfg PORT [ENSEMBLE_INDEX]
  local port=$1 idx=${2:-} d; d=$(zk_dir "$1")
  mkdir -p "$d/data" "$d/logs"
  {
    echo "tickTime=500"
    echo "initLimit=20"
    echo "syncLimit=10"
    echo "dataDir=$d/data"
    echo "clientPort=$port"
    echo "clientPortAddress=127.0.0.1"
    echo "minSessionTimeout=1000"
    echo "maxSessionTimeout=60000"
    echo "maxClientCnxns=0"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons"
    echo "autopurge.purgeInterval=1"
    if [ "$port" = "$ZK_PORT" ]; then
      # The standalone server also listens for TLS (Netty serves both ports), with the private
      # CA's certificate for localhost, and requires a client certificate from that CA. It checks
      # no client's host name (the client checks the server's). `start-one` comes here without
      # `up`'s TLS step: the private CA is made here when missing.
      tls_up
      cat "$TLS/server.key" "$TLS/server.crt" >"$d/server.pem"
      echo "secureClientPort=$ZK_TLS_PORT"
      echo "secureClientPortAddress=127.0.0.1"
      echo "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"
      echo "ssl.keyStore.location=$d/server.pem"
      echo "ssl.keyStore.type=PEM"
      echo "ssl.trustStore.location=$TLS/ca.crt"
      echo "ssl.trustStore.type=PEM"
      echo "ssl.clientAuth=need"
      echo "ssl.hostnameVerification=false"
    fi
    if [ -n "$idx" ]; then
      local i=1
      for p in "${ZK_ENSEMBLE_PORTS[@]}"; do
        echo "server.$i=127.0.0.1:$((p + 100)):$((p + 110))"
        i=$((i + 1))
      done
      echo "$idx" >"$d/data/myid"
    fi
  } >"$d/zoo.cfg"
}
zk_ok() { [ "$(tcp_say "$1" ruok 2>/dev/null)" = "imok" ] && tcp_say "$1" srvr 2>/dev/null | grep -q '^Mode: '; }
zk_start() { # zk_start PORT [ENSEMBLE_INDEX]
  local port=$1 d; d=$(zk_dir "$1")
  ensure_pkg "$ZK_HOME/bin/zkServer.sh" zookeeper
  ensure_pkg java default-jre-headless
  # Curator and a JDK for the LeaderLatch interop test (distlock-cli/tests/curator_election.rs).
  ensure_pkg javac default-jdk-headless
  ensure_pkg /usr/share/java/curator-recipes.jar libcurator-recipes-java
  local pid; pid=$(pidof_file "$d/zk.pid")
  if ours "$pid" "$d/zoo.cfg"; then resumed "$pid"; return 0; fi
  zk_write_cfg "$@"
  # Start the JVM directly (as zkServer.sh would) so the pid is the JVM's and nothing opens JMX.
  local cp; cp=$(zk_classpath)
  (
    cd "$d"
    setsid nohup java -Xmx256m -Dzookeeper.log.dir="$d/logs" \
      -Dzookeeper.jmx.log4j.disable=true -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" >"$d/logs/zk.out" 2>&1 </dev/null &
    echo $! >"$d/zk.pid"
  )
}
zk_wait() { wait_until "zookeeper on $1" "$(zk_dir "$1")/logs/zk.out" zk_ok "$1"; }
zk_stop() {
  local d pid; d=$(zk_dir "$1"); pid=$(pidof_file "$d/zk.pid")
  if ours "$pid" "$d/zoo.cfg"; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$d/zk.pid"
}

# --- ZooKeeper in network namespaces -----------------------------------------------------------
# A second 3-node ensemble whose members live in their own network namespaces (dl-zk1..3, on a
# bridge dlbr0: members 10.231.0.1-3, this host 10.231.0.254; the chaos set: dl-zkc1..3, dlbrc0,
# 10.231.1.0/24), so one member can be cut from
# another (a follower from its leader) while clients still reach it — a partition a TCP proxy
# cannot fake. Only these namespaces' own addresses are used.
NETNS_N=(1 2 3)
netns_ip() { echo "$NETNS_NET.$1"; }
netns_net_up() { # returns non-zero where namespaces cannot be made (no root / CAP_NET_ADMIN)
  ensure_pkg ip iproute2
  if ! ip link show "$NETNS_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NETNS_BRIDGE" type bridge 2>/dev/null || return 1
    ip addr add "$NETNS_NET.254/24" dev "$NETNS_BRIDGE" || return 1
    ip link set "$NETNS_BRIDGE" up || return 1
  fi
  local n
  for n in "${NETNS_N[@]}"; do
    ip netns list | grep -qw "$NETNS_PREFIX$n" && continue
    ip netns add "$NETNS_PREFIX$n" || return 1
    ip link add "$NETNS_VETH$n" type veth peer name "$NETNS_VETH${n}p" || return 1
    ip link set "$NETNS_VETH${n}p" netns "$NETNS_PREFIX$n" || return 1
    ip netns exec "$NETNS_PREFIX$n" ip link set "$NETNS_VETH${n}p" name eth0 || return 1
    ip netns exec "$NETNS_PREFIX$n" ip addr add "$(netns_ip "$n")/24" dev eth0 || return 1
    ip netns exec "$NETNS_PREFIX$n" ip link set eth0 up || return 1
    ip netns exec "$NETNS_PREFIX$n" ip link set lo up || return 1
    ip link set "$NETNS_VETH$n" master "$NETNS_BRIDGE" || return 1
    ip link set "$NETNS_VETH$n" up || return 1
  done
}
NETNS_UNSUPPORTED="$DIR/netns-unsupported"
netns_net_down() {
  local n
  for n in "${NETNS_N[@]}"; do ip netns del "$NETNS_PREFIX$n" 2>/dev/null || true; done
  ip link del "$NETNS_BRIDGE" 2>/dev/null || true
}
zkns_dir() { echo "$DIR/zk-netns-$1"; }
zkns_ok() { [ "$(tcp_say 2181 ruok "$(netns_ip "$1")" 2>/dev/null)" = "imok" ] && tcp_say 2181 srvr "$(netns_ip "$1")" 2>/dev/null | grep -q '^Mode: '; }
zkns_start() { # zkns_start N
  local n=$1 d; d=$(zkns_dir "$1")
  ensure_pkg "$ZK_HOME/bin/zkServer.sh" zookeeper
  ensure_pkg java default-jre-headless
  local pid; pid=$(pidof_file "$d/zk.pid")
  if ours "$pid" "$d/zoo.cfg"; then resumed "$pid"; return 0; fi
  mkdir -p "$d/data" "$d/logs"
  echo "$n" >"$d/data/myid"
  {
    echo "tickTime=500"; echo "initLimit=20"; echo "syncLimit=10"
    echo "dataDir=$d/data"; echo "clientPort=2181"; echo "clientPortAddress=$(netns_ip "$n")"
    echo "minSessionTimeout=1000"; echo "maxSessionTimeout=60000"; echo "maxClientCnxns=0"
    echo "admin.enableServer=false"; echo "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons"
    local i; for i in "${NETNS_N[@]}"; do echo "server.$i=$(netns_ip "$i"):2888:3888"; done
  } >"$d/zoo.cfg"
  (
    cd "$d"
    ip netns exec "$NETNS_PREFIX$n" setsid nohup java -Xmx256m -Dzookeeper.log.dir="$d/logs" \
      -Dzookeeper.jmx.log4j.disable=true -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$(zk_classpath)" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" >"$d/logs/zk.out" 2>&1 </dev/null &
    echo $! >"$d/zk.pid"
  )
}
zkns_stop() {
  local d pid; d=$(zkns_dir "$1"); pid=$(pidof_file "$d/zk.pid")
  if ours "$pid" "$d/zoo.cfg"; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$d/zk.pid"
}
# netns-cut A B / netns-heal A B: drop everything between members A and B (both directions).
netns_cut() {
  ip netns exec "$NETNS_PREFIX$1" ip route replace blackhole "$(netns_ip "$2")/32"
  ip netns exec "$NETNS_PREFIX$2" ip route replace blackhole "$(netns_ip "$1")/32"
}
netns_heal() {
  ip netns exec "$NETNS_PREFIX$1" ip route del blackhole "$(netns_ip "$2")/32" 2>/dev/null || true
  ip netns exec "$NETNS_PREFIX$2" ip route del blackhole "$(netns_ip "$1")/32" 2>/dev/null || true
}

# --- PostgreSQL ------------------------------------------------------------------------------
PG_DIR="$DIR/postgres"
pg_ok() { "$(pg_bin)/pg_isready" -h 127.0.0.1 -p "$PG_PORT" -q; }
pg_up_pkgs() {
  ensure_pkg /usr/lib/postgresql postgresql
  [ -n "$(pg_bin)" ] || ensure_pkg "/usr/lib/postgresql/none" postgresql
}
pg_up() {
  pg_up_pkgs
  local bin; bin=$(pg_bin)
  mkdir -p "$PG_DIR"; chown postgres:postgres "$PG_DIR"; chmod 0700 "$PG_DIR"
  if [ ! -f "$PG_DIR/data/PG_VERSION" ]; then
    runuser -u postgres -- "$bin/initdb" -D "$PG_DIR/data" --auth=trust -U postgres >"$DIR/postgres-initdb.log" 2>&1 \
      || die "initdb failed; see $DIR/postgres-initdb.log"
  fi
  if ! pg_ok; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" -w -t 60 start \
      -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $PG_DIR -c max_connections=1500 -c fsync=off -c synchronous_commit=off" \
      >/dev/null || die "postgres did not start; see $PG_DIR/postgres.log"
  fi
  wait_until "postgres on $PG_PORT" "$PG_DIR/postgres.log" pg_ok
  if [ "$(psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "select 1 from pg_database where datname='distlock'")" != "1" ]; then
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "create database distlock" >/dev/null 2>&1 || true
  fi
  # A role that must give its password (the rest of this private instance trusts loopback), so
  # the bad-input tests can show a wrong password being refused.
  local hba="$PG_DIR/data/pg_hba.conf"
  if ! grep -q '^host all distlock_pw ' "$hba"; then
    sed -i '1i host all distlock_pw 127.0.0.1/32 scram-sha-256' "$hba"
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qtAc "select pg_reload_conf()" >/dev/null
  fi
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "do \$\$ begin
      if not exists (select from pg_roles where rolname = 'distlock_pw') then
        create role distlock_pw login password 'distlock-pw';
      end if; end \$\$; grant all on database distlock to distlock_pw" >/dev/null
  # distlock_noperm: no privileges on the lock tables (the bad-input tests expect
  # `InvalidConfig`). distlock_pw: what an application role needs, the lock tables (whoever
  # created them) and, for a fresh database, CREATE on the schema once.
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d distlock -qc "do \$\$ begin
      if not exists (select from pg_roles where rolname = 'distlock_noperm') then
        create role distlock_noperm login;
      end if; end \$\$;
      revoke create on schema public from public;
      grant usage, create on schema public to distlock_pw;
      grant select, insert, update, delete on all tables in schema public to distlock_pw;
      grant usage, select, update on all sequences in schema public to distlock_pw;
      alter default privileges for role postgres in schema public
        grant select, insert, update, delete on tables to distlock_pw;
      alter default privileges for role postgres in schema public
        grant usage, select, update on sequences to distlock_pw" >/dev/null
}
pg_down() {
  local bin; bin=$(pg_bin)
  if [ -f "$PG_DIR/data/postmaster.pid" ]; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  fi
}

# --- MariaDB ---------------------------------------------------------------------------------
MY_DIR="$DIR/mysql"
my_ok() { mariadb-admin -h 127.0.0.1 -P "$MYSQL_PORT" -uroot --connect-timeout=2 ping >/dev/null 2>&1; }
my_up() {
  ensure_pkg mariadbd mariadb-server
  mkdir -p "$MY_DIR"
  if [ ! -d "$MY_DIR/data/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$MY_DIR/data" --user=root --auth-root-authentication-method=normal \
      --skip-test-db >"$DIR/mysql-install.log" 2>&1 || die "mariadb-install-db failed; see $DIR/mysql-install.log"
  fi
  local pid; pid=$(pidof_file "$MY_DIR/data/mariadbd.pid")
  if ours "$pid" "--datadir=$MY_DIR/data"; then resumed "$pid"; else
    setsid nohup mariadbd --no-defaults --datadir="$MY_DIR/data" --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
      --socket="$MY_DIR/mysqld.sock" --pid-file="$MY_DIR/data/mariadbd.pid" --user=root \
      --max-connections=3000 --innodb-flush-log-at-trx-commit=2 --innodb-buffer-pool-size=128M \
      --skip-name-resolve --log-error="$MY_DIR/error.log" >/dev/null 2>&1 </dev/null &
  fi
  local deadline=$((SECONDS + WAIT_SECS))
  until mariadb --socket="$MY_DIR/mysqld.sock" -uroot -e "select 1" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "mariadb on $MYSQL_PORT did not answer; see $MY_DIR/error.log"
    sleep 0.3
  done
  mariadb --socket="$MY_DIR/mysqld.sock" -uroot -e "
    CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
    GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
    CREATE USER IF NOT EXISTS 'distlock_noperm'@'127.0.0.1' IDENTIFIED BY '';
    CREATE DATABASE IF NOT EXISTS distlock;" >/dev/null
  wait_until "mariadb on $MYSQL_PORT" "$MY_DIR/error.log" my_ok
}
my_down() {
  local pid; pid=$(pidof_file "$MY_DIR/data/mariadbd.pid")
  if ours "$pid" "--datadir=$MY_DIR/data"; then
    resumed "$pid"; kill "$pid" 2>/dev/null || true
    local i; for i in $(seq 1 100); do alive "$pid" || break; sleep 0.2; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
  fi
}

# --- etcd with TLS and authentication ---------------------------------------------------------
# One member on $ETCD_SECURE_PORT (https, the private CA's localhost certificate, and clients must
# present a certificate it signed; peer plain on +1, loopback only). Authentication on: user `distlock` (password distlock-etcd-pw, also in
# $TLS/etcd-password) may read and write only keys under `locks/`; `root` administers.
etcdctl_secure() { ETCDCTL_API=3 etcdctl --endpoints "https://localhost:$ETCD_SECURE_PORT" --cacert "$TLS/ca.crt" --cert "$TLS/client.crt" --key "$TLS/client.key" --dial-timeout=2s --command-timeout=5s "$@"; }
# (etcdctl only warns when given a user while authentication is off: check that it is on.)
etcd_secure_auth_on() { ! etcdctl_secure get --limit 1 locks/ >/dev/null 2>&1; }
etcd_secure_ok() { etcd_secure_auth_on && etcdctl_secure --user distlock:distlock-etcd-pw get --prefix locks/ --limit 1 >/dev/null 2>&1; }
etcd_secure_up() {
  tls_up
  ensure_pkg etcd etcd-server
  ensure_pkg etcdctl etcd-client
  local port=$ETCD_SECURE_PORT d; d=$(etcd_dir "$ETCD_SECURE_PORT")
  mkdir -p "$d"
  local pid; pid=$(pidof_file "$d/etcd.pid")
  if ! ours "$pid" "--data-dir $d/data"; then
    (
      cd "$d"
      ETCD_UNSUPPORTED_ARCH="" setsid nohup etcd --name "etcd-$port" --data-dir "$d/data" \
        --listen-client-urls "https://127.0.0.1:$port" --advertise-client-urls "https://localhost:$port" \
        --cert-file "$TLS/server.crt" --key-file "$TLS/server.key" --trusted-ca-file "$TLS/ca.crt" \
        --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
        --initial-cluster "etcd-$port=http://127.0.0.1:$((port + 1))" --initial-cluster-token "distlock-etcd-$port" \
        --initial-cluster-state new --heartbeat-interval 60 --election-timeout 600 --enable-v2=false \
        >>"$d/etcd.log" 2>&1 </dev/null &
      echo $! >"$d/etcd.pid"
    )
  else
    resumed "$pid"
  fi
  printf 'distlock-etcd-pw\n' >"$TLS/etcd-password"
  etcd_secure_ok && return 0
  # First start (auth still off): make the users and roles, then turn authentication on.
  local deadline=$((SECONDS + WAIT_SECS))
  until etcdctl_secure --user root:distlock-etcd-root endpoint health >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "etcd (TLS) on $port did not answer; see $d/etcd.log"
    sleep 0.3
  done
  if ! etcd_secure_auth_on; then
    etcdctl_secure user get root >/dev/null 2>&1 || etcdctl_secure user add root:distlock-etcd-root >/dev/null
    etcdctl_secure user get distlock >/dev/null 2>&1 || etcdctl_secure user add distlock:distlock-etcd-pw >/dev/null
    etcdctl_secure role get distlock >/dev/null 2>&1 || etcdctl_secure role add distlock >/dev/null
    etcdctl_secure role grant-permission distlock --prefix=true readwrite locks/ >/dev/null
    etcdctl_secure user grant-role distlock distlock >/dev/null
    etcdctl_secure auth enable >/dev/null
  fi
  wait_until "etcd (TLS, auth) on $port" "$d/etcd.log" etcd_secure_ok
}

# --- PostgreSQL and MariaDB that require TLS ----------------------------------------------------
# Their own instances (data under $DIR/postgres-tls, $DIR/mysql-tls): TLS with the private CA's
# localhost certificate, and every connection must use it and give a password (role and user
# distlock_tls / distlock-tls-pw, the password also in $TLS/sql-password).
PG_TLS_DIR="$DIR/postgres-tls"
pg_tls_ok() { PGPASSWORD=distlock-tls-pw PGSSLMODE=verify-full PGSSLROOTCERT="$TLS/ca.crt" "$(pg_bin)/pg_isready" -h localhost -p "$PG_TLS_PORT" -q; }
pg_tls_up() {
  tls_up; pg_up_pkgs
  local bin; bin=$(pg_bin)
  mkdir -p "$PG_TLS_DIR"; chown postgres:postgres "$PG_TLS_DIR"; chmod 0700 "$PG_TLS_DIR"
  if [ ! -f "$PG_TLS_DIR/data/PG_VERSION" ]; then
    runuser -u postgres -- "$bin/initdb" -D "$PG_TLS_DIR/data" --auth=trust -U postgres >"$DIR/postgres-tls-initdb.log" 2>&1 \
      || die "initdb failed; see $DIR/postgres-tls-initdb.log"
    install -o postgres -g postgres -m 0600 "$TLS/server.key" "$PG_TLS_DIR/data/server.key"
    install -o postgres -g postgres -m 0644 "$TLS/server.crt" "$PG_TLS_DIR/data/server.crt"
    # Local socket: trust (the script's own set-up); TCP: TLS and a password, or nothing.
    cat >"$PG_TLS_DIR/data/pg_hba.conf" <<HBA
local all all trust
hostssl all all 127.0.0.1/32 scram-sha-256
hostssl all all ::1/128 scram-sha-256
hostnossl all all 0.0.0.0/0 reject
hostnossl all all ::/0 reject
HBA
  fi
  if ! pg_tls_ok; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$PG_TLS_DIR/data" -l "$PG_TLS_DIR/postgres.log" -w -t 60 start \
      -o "-p $PG_TLS_PORT -c listen_addresses=127.0.0.1 -k $PG_TLS_DIR -c ssl=on -c fsync=off -c synchronous_commit=off" \
      >/dev/null || die "postgres (TLS) did not start; see $PG_TLS_DIR/postgres.log"
  fi
  psql -h "$PG_TLS_DIR" -p "$PG_TLS_PORT" -U postgres -qc "do \$\$ begin
      if not exists (select from pg_roles where rolname = 'distlock_tls') then
        create role distlock_tls login password 'distlock-tls-pw';
      end if; end \$\$;" >/dev/null
  if [ "$(psql -h "$PG_TLS_DIR" -p "$PG_TLS_PORT" -U postgres -tAc "select 1 from pg_database where datname='distlock'")" != "1" ]; then
    psql -h "$PG_TLS_DIR" -p "$PG_TLS_PORT" -U postgres -qc "create database distlock owner distlock_tls" >/dev/null
  fi
  printf 'distlock-tls-pw\n' >"$TLS/sql-password"
  wait_until "postgres (TLS) on $PG_TLS_PORT" "$PG_TLS_DIR/postgres.log" pg_tls_ok
}
pg_tls_down() {
  if [ -f "$PG_TLS_DIR/data/postmaster.pid" ]; then
    runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$PG_TLS_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  fi
}

MY_TLS_DIR="$DIR/mysql-tls"
my_tls_ok() { mariadb-admin -h localhost --protocol=tcp -P "$MYSQL_TLS_PORT" -udistlock_tls -pdistlock-tls-pw --ssl --ssl-ca="$TLS/ca.crt" --ssl-verify-server-cert --connect-timeout=2 ping >/dev/null 2>&1; }
my_tls_up() {
  tls_up
  ensure_pkg mariadbd mariadb-server
  mkdir -p "$MY_TLS_DIR"
  if [ ! -d "$MY_TLS_DIR/data/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$MY_TLS_DIR/data" --user=root --auth-root-authentication-method=normal \
      --skip-test-db >"$DIR/mysql-tls-install.log" 2>&1 || die "mariadb-install-db failed; see $DIR/mysql-tls-install.log"
  fi
  local pid; pid=$(pidof_file "$MY_TLS_DIR/data/mariadbd.pid")
  if ours "$pid" "--datadir=$MY_TLS_DIR/data"; then resumed "$pid"; else
    setsid nohup mariadbd --no-defaults --datadir="$MY_TLS_DIR/data" --port="$MYSQL_TLS_PORT" --bind-address=127.0.0.1 \
      --socket="$MY_TLS_DIR/mysqld.sock" --pid-file="$MY_TLS_DIR/data/mariadbd.pid" --user=root \
      --ssl-ca="$TLS/ca.crt" --ssl-cert="$TLS/server.crt" --ssl-key="$TLS/server.key" --require-secure-transport=ON \
      --innodb-flush-log-at-trx-commit=2 --innodb-buffer-pool-size=64M \
      --skip-name-resolve --log-error="$MY_TLS_DIR/error.log" >/dev/null 2>&1 </dev/null &
  fi
  local deadline=$((SECONDS + WAIT_SECS))
  until mariadb --socket="$MY_TLS_DIR/mysqld.sock" -uroot -e "select 1" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "mariadb (TLS) on $MYSQL_TLS_PORT did not answer; see $MY_TLS_DIR/error.log"
    sleep 0.3
  done
  mariadb --socket="$MY_TLS_DIR/mysqld.sock" -uroot -e "
    CREATE USER IF NOT EXISTS 'distlock_tls'@'127.0.0.1' IDENTIFIED BY 'distlock-tls-pw' REQUIRE SSL;
    CREATE DATABASE IF NOT EXISTS distlock;
    GRANT ALL ON distlock.* TO 'distlock_tls'@'127.0.0.1';" >/dev/null
  printf 'distlock-tls-pw\n' >"$TLS/sql-password"
  wait_until "mariadb (TLS) on $MYSQL_TLS_PORT" "$MY_TLS_DIR/error.log" my_tls_ok
}
my_tls_down() {
  local pid; pid=$(pidof_file "$MY_TLS_DIR/data/mariadbd.pid")
  if ours "$pid" "--datadir=$MY_TLS_DIR/data"; then
    resumed "$pid"; kill "$pid" 2>/dev/null || true
    local i; for i in $(seq 1 100); do alive "$pid" || break; sleep 0.2; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
  fi
}

# --- etcd ------------------------------------------------------------------------------------
# Debian's etcd-server (3.4), one process per member, peer port = client port + 1. A 60 ms
# heartbeat (election timeout 10 heartbeats) makes the server's minimum lease TTL
# ceil(1.5 * election timeout) = 1 s, so a 1 s lock lease is granted as asked.
etcd_dir() { echo "$DIR/etcd-$1"; }
etcd_ok() { ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$1" --dial-timeout=1s --command-timeout=2s endpoint health >/dev/null 2>&1; }
etcd_is_member() { local p; for p in "${ETCD_CLUSTER_PORTS[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }
etcd_start() { # etcd_start CLIENT_PORT (a cluster member when it is one of ETCD_CLUSTER_PORTS)
  local port=$1 d; d=$(etcd_dir "$1")
  ensure_pkg etcd etcd-server
  ensure_pkg etcdctl etcd-client
  mkdir -p "$d"
  local pid; pid=$(pidof_file "$d/etcd.pid")
  if ours "$pid" "--data-dir $d/data"; then resumed "$pid"; return 0; fi
  local cluster="etcd-$port=http://127.0.0.1:$((port + 1))" token="distlock-etcd-$port" p
  if etcd_is_member "$port"; then
    cluster=$(for p in "${ETCD_CLUSTER_PORTS[@]}"; do printf 'etcd-%s=http://127.0.0.1:%s,' "$p" $((p + 1)); done | sed 's/,$//')
    token="distlock-etcd-cluster-${ETCD_CLUSTER_PORTS[0]}"
  fi
  (
    cd "$d"
    ETCD_UNSUPPORTED_ARCH="" setsid nohup etcd --name "etcd-$port" --data-dir "$d/data" \
      --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
      --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
      --initial-cluster "$cluster" --initial-cluster-token "$token" --initial-cluster-state new \
      --heartbeat-interval 60 --election-timeout 600 --enable-v2=false \
      >>"$d/etcd.log" 2>&1 </dev/null &
    echo $! >"$d/etcd.pid"
  )
}
etcd_wait() { wait_until "etcd on $1" "$(etcd_dir "$1")/etcd.log" etcd_ok "$1"; }
etcd_stop() {
  local d pid; d=$(etcd_dir "$1"); pid=$(pidof_file "$d/etcd.pid")
  if ours "$pid" "--data-dir $d/data"; then
    resumed "$pid"; kill "$pid" 2>/dev/null || true
    local i; for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$d/etcd.pid"
}
etcd_role() { # leader|follower, from the member's own status
  ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$1" --dial-timeout=1s --command-timeout=2s endpoint status -w json 2>/dev/null \
    | python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["Status"]; print("leader" if s["header"]["member_id"]==s["leader"] else "follower")' 2>/dev/null || echo "?"
}

# --- per-service dispatch --------------------------------------------------------------------
ALL=(redis redlock zk zk-ensemble zk-netns postgres mysql etcd etcd-cluster redis-tls postgres-tls mysql-tls etcd-secure redis-sentinel redis-cluster)

svc_up() {
  case $1 in
    redis) redis_start "$REDIS_PORT"; redis_start "$REDIS_REPLICA_PORT"; redis_py_venv ;;
    redis-tls) redis_tls_up ;;
    redis-sentinel) sentinel_up ;;
    redis-cluster) cluster_up ;;
    redlock) for p in "${REDLOCK_PORTS[@]}"; do redis_start "$p"; done ;;
    zk) tls_up; zk_start "$ZK_PORT"; zk_wait "$ZK_PORT" ;;
    zk-ensemble)
      local i=1; for p in "${ZK_ENSEMBLE_PORTS[@]}"; do zk_start "$p" "$i"; i=$((i + 1)); done
      for p in "${ZK_ENSEMBLE_PORTS[@]}"; do zk_wait "$p"; done ;;
    zk-netns)
      if ! netns_net_up; then
        log "WARNING: cannot create network namespaces here (needs root with CAP_NET_ADMIN); zk-netns skipped and its scenario reported as not run"
        netns_net_down; touch "$NETNS_UNSUPPORTED"; return 0
      fi
      rm -f "$NETNS_UNSUPPORTED"
      # A partition test that the run's end interrupted may have left a cut in place.
      netns_heal 1 2; netns_heal 1 3; netns_heal 2 3
      local n; for n in "${NETNS_N[@]}"; do zkns_start "$n"; done
      for n in "${NETNS_N[@]}"; do wait_until "zookeeper on $(netns_ip "$n")" "$(zkns_dir "$n")/logs/zk.out" zkns_ok "$n"; done ;;
    postgres) pg_up ;;
    mysql) my_up ;;
    postgres-tls) pg_tls_up ;;
    mysql-tls) my_tls_up ;;
    etcd-secure) etcd_secure_up ;;
    etcd) etcd_start "$ETCD_PORT"; etcd_wait "$ETCD_PORT" ;;
    etcd-cluster)
      for p in "${ETCD_CLUSTER_PORTS[@]}"; do etcd_start "$p"; done
      for p in "${ETCD_CLUSTER_PORTS[@]}"; do etcd_wait "$p"; done ;;
    *) die "unknown service '$1' (known: ${ALL[*]})" ;;
  esac
}
svc_down() {
  case $1 in
    redis) redis_stop "$REDIS_REPLICA_PORT"; redis_stop "$REDIS_PORT" ;;
    redis-tls) redis_stop "$REDIS_TLS_PORT" ;;
    redis-sentinel) sentinel_stop_all ;;
    redis-cluster) cluster_down ;;
    redlock) for p in "${REDLOCK_PORTS[@]}"; do redis_stop "$p"; done ;;
    zk) zk_stop "$ZK_PORT" ;;
    zk-ensemble) for p in "${ZK_ENSEMBLE_PORTS[@]}"; do zk_stop "$p"; done ;;
    zk-netns) for n in "${NETNS_N[@]}"; do zkns_stop "$n"; done; netns_net_down ;;
    postgres) pg_down ;;
    mysql) my_down ;;
    postgres-tls) pg_tls_down ;;
    mysql-tls) my_tls_down ;;
    etcd-secure) etcd_stop "$ETCD_SECURE_PORT" ;;
    etcd) etcd_stop "$ETCD_PORT" ;;
    etcd-cluster) for p in "${ETCD_CLUSTER_PORTS[@]}"; do etcd_stop "$p"; done ;;
    *) die "unknown service '$1' (known: ${ALL[*]})" ;;
  esac
}
svc_status() { # prints lines, returns non-zero if any is down
  local bad=0 p
  case $1 in
    redis) for p in "$REDIS_PORT" "$REDIS_REPLICA_PORT"; do if redis_ok "$p"; then echo "redis $p up"; else echo "redis $p down"; bad=1; fi; done ;;
    redis-tls) if redis_tls_ok; then echo "redis-tls $REDIS_TLS_PORT up"; else echo "redis-tls $REDIS_TLS_PORT down"; bad=1; fi ;;
    redis-sentinel) if sentinel_all_ok; then echo "redis-sentinel ${SENTINEL_PORTS[*]} up (master $(redis-cli -p "${SENTINEL_PORTS[0]}" sentinel get-master-addr-by-name distlock | sed -n 2p))"; else echo "redis-sentinel ${SENTINEL_PORTS[*]} down"; bad=1; fi ;;
    redis-cluster) if cluster_ok; then echo "redis-cluster ${CLUSTER_PORTS[*]} up"; else echo "redis-cluster ${CLUSTER_PORTS[*]} down"; bad=1; fi ;;
    redlock) for p in "${REDLOCK_PORTS[@]}"; do if redis_ok "$p"; then echo "redlock $p up"; else echo "redlock $p down"; bad=1; fi; done ;;
    zk) if zk_ok "$ZK_PORT"; then echo "zk $ZK_PORT up"; else echo "zk $ZK_PORT down"; bad=1; fi ;;
    zk-ensemble) for p in "${ZK_ENSEMBLE_PORTS[@]}"; do if zk_ok "$p"; then echo "zk-ensemble $p up ($(tcp_say "$p" srvr | sed -n 's/^Mode: //p'))"; else echo "zk-ensemble $p down"; bad=1; fi; done ;;
    zk-netns) [ -f "$NETNS_UNSUPPORTED" ] && { echo "zk-netns unsupported here (no network namespaces)"; return 0; }
      for p in "${NETNS_N[@]}"; do if zkns_ok "$p"; then echo "zk-netns $p $(netns_ip "$p") up ($(tcp_say 2181 srvr "$(netns_ip "$p")" | sed -n 's/^Mode: //p'))"; else echo "zk-netns $p $(netns_ip "$p") down"; bad=1; fi; done ;;
    postgres) if pg_ok; then echo "postgres $PG_PORT up"; else echo "postgres $PG_PORT down"; bad=1; fi ;;
    mysql) if my_ok; then echo "mysql $MYSQL_PORT up"; else echo "mysql $MYSQL_PORT down"; bad=1; fi ;;
    postgres-tls) if pg_tls_ok; then echo "postgres-tls $PG_TLS_PORT up"; else echo "postgres-tls $PG_TLS_PORT down"; bad=1; fi ;;
    etcd-secure) if etcd_secure_ok; then echo "etcd-secure $ETCD_SECURE_PORT up"; else echo "etcd-secure $ETCD_SECURE_PORT down"; bad=1; fi ;;
    mysql-tls) if my_tls_ok; then echo "mysql-tls $MYSQL_TLS_PORT up"; else echo "mysql-tls $MYSQL_TLS_PORT down"; bad=1; fi ;;
    etcd) if etcd_ok "$ETCD_PORT"; then echo "etcd $ETCD_PORT up"; else echo "etcd $ETCD_PORT down"; bad=1; fi ;;
    etcd-cluster) for p in "${ETCD_CLUSTER_PORTS[@]}"; do if etcd_ok "$p"; then echo "etcd-cluster $p up ($(etcd_role "$p"))"; else echo "etcd-cluster $p down"; bad=1; fi; done ;;
    *) die "unknown service '$1' (known: ${ALL[*]})" ;;
  esac
  return $bad
}

one_instance() { # NAME -> "kind port"
  case $1 in
    redis-*) echo "redis ${1#redis-}" ;;
    zk-*) echo "zk ${1#zk-}" ;;
    zkns-*) echo "zkns ${1#zkns-}" ;;
    postgres|postgres-*) echo "postgres $PG_PORT" ;;
    mysql|mysql-*) echo "mysql $MYSQL_PORT" ;;
    etcd-*) echo "etcd ${1#etcd-}" ;;
    *) die "unknown instance '$1' (e.g. redis-16379, redis-17003, zk-12181, zk-12282, zkns-2, postgres, mysql, etcd-12379, etcd-12489)" ;;
  esac
}

print_urls() {
  cat <<EOF
DISTLOCK_TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT
DISTLOCK_TEST_REDLOCK_URL=redlock://$(printf '127.0.0.1:%s,' "${REDLOCK_PORTS[@]}" | sed 's/,$//')
DISTLOCK_TEST_ZK_URL=zk://127.0.0.1:$ZK_PORT
DISTLOCK_TEST_ZK_ENSEMBLE_URL=zk://$(printf '127.0.0.1:%s,' "${ZK_ENSEMBLE_PORTS[@]}" | sed 's/,$//')
DISTLOCK_TEST_ZK_NETNS_URL=zk://$(for n in "${NETNS_N[@]}"; do printf '%s:2181,' "$(netns_ip "$n")"; done | sed 's/,$//')
DISTLOCK_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$PG_PORT/distlock
DISTLOCK_TEST_MYSQL_URL=mysql://root@127.0.0.1:$MYSQL_PORT/distlock
DISTLOCK_TEST_ETCD_URL=etcd://127.0.0.1:$ETCD_PORT
DISTLOCK_TEST_ETCD_CLUSTER_URL=etcd://$(printf '127.0.0.1:%s,' "${ETCD_CLUSTER_PORTS[@]}" | sed 's/,$//')
DISTLOCK_TEST_REDIS_TLS_URL=rediss://distlock@localhost:$REDIS_TLS_PORT?ca=$TLS/ca.crt&password_file=$TLS/redis-password
DISTLOCK_TEST_POSTGRES_TLS_URL=postgres://distlock_tls@localhost:$PG_TLS_PORT/distlock?sslmode=verify-full&sslrootcert=$TLS/ca.crt&password_file=$TLS/sql-password
DISTLOCK_TEST_MYSQL_TLS_URL=mysql://distlock_tls@localhost:$MYSQL_TLS_PORT/distlock?ssl-mode=VERIFY_IDENTITY&ssl-ca=$TLS/ca.crt&password_file=$TLS/sql-password
DISTLOCK_TEST_ETCD_SECURE_URL=etcds://distlock@localhost:$ETCD_SECURE_PORT/locks?ca=$TLS/ca.crt&cert=$TLS/client.crt&key=$TLS/client.key&password_file=$TLS/etcd-password
DISTLOCK_TEST_REDIS_SENTINEL_URL=redis+sentinel://$(printf '127.0.0.1:%s,' "${SENTINEL_PORTS[@]}" | sed 's/,$//')/distlock
DISTLOCK_TEST_REDIS_CLUSTER_URL=redis+cluster://$(printf '127.0.0.1:%s,' "${CLUSTER_PORTS[@]:0:3}" | sed 's/,$//')
DISTLOCK_TEST_ZK_AUTH_URL=zk://distlock@127.0.0.1:$ZK_PORT?password_file=$TLS/zk-password
DISTLOCK_TEST_ZK_TLS_URL=zks://distlock@localhost:$ZK_TLS_PORT?ca=$TLS/ca.crt&cert=$TLS/client.crt&key=$TLS/client.key&password_file=$TLS/zk-password
DISTLOCK_TEST_TLS_DIR=$TLS
DISTLOCK_REDIS_PY=$DIR/redis-py/bin/python
EOF
}

cmd=${1:-status}; shift || true
services=("$@"); [ ${#services[@]} -gt 0 ] || services=("${ALL[@]}")

case $cmd in
  up)
    ensure_pkg protoc protobuf-compiler   # distlock-etcd's build (etcd-client generates its gRPC code)
    for s in "${services[@]}"; do svc_up "$s"; done
    for s in "${services[@]}"; do svc_status "$s" >/dev/null || die "$s is not answering after start"; done
    print_urls ;;
  down) for s in "${services[@]}"; do svc_down "$s"; done ;;
  status)
    rc=0; for s in "${services[@]}"; do svc_status "$s" || rc=1; done; exit $rc ;;
  urls) print_urls ;;
  stop-one|start-one|pid)
    [ ${#services[@]} -eq 1 ] && [ "${services[0]}" != redis ] || die "usage: $0 $cmd NAME (e.g. redis-17003, zk-12282)"
    read -r kind port <<<"$(one_instance "${services[0]}")"
    case "$cmd:$kind" in
      stop-one:redis) redis_stop "$port" ;;
      start-one:redis) redis_start "$port" ;;
      pid:redis) pidof_file "$(redis_pidfile "$port")" ;;
      stop-one:zk) zk_stop "$port" ;;
      start-one:zk)
        idx=""; i=1; for p in "${ZK_ENSEMBLE_PORTS[@]}"; do [ "$p" = "$port" ] && idx=$i; i=$((i + 1)); done
        zk_start "$port" $idx; zk_wait "$port" ;;
      pid:zk) pidof_file "$(zk_dir "$port")/zk.pid" ;;
      stop-one:zkns) zkns_stop "$port" ;;
      start-one:zkns) zkns_start "$port"; wait_until "zookeeper on $(netns_ip "$port")" "$(zkns_dir "$port")/logs/zk.out" zkns_ok "$port" ;;
      pid:zkns) pidof_file "$(zkns_dir "$port")/zk.pid" ;;
      stop-one:postgres) pg_down ;;
      start-one:postgres) pg_up ;;
      pid:postgres) head -1 "$PG_DIR/data/postmaster.pid" 2>/dev/null || true ;;
      stop-one:mysql) my_down ;;
      start-one:mysql) my_up ;;
      pid:mysql) pidof_file "$MY_DIR/data/mariadbd.pid" ;;
      stop-one:etcd) etcd_stop "$port" ;;
      start-one:etcd) etcd_start "$port"; etcd_is_member "$port" || etcd_wait "$port" ;;
      pid:etcd) pidof_file "$(etcd_dir "$port")/etcd.pid" ;;
    esac ;;
  netns-cut|netns-heal)
    [ ${#services[@]} -eq 2 ] || die "usage: $0 $cmd A B (zk-netns members, e.g. 1 3)"
    if [ "$cmd" = netns-cut ]; then netns_cut "${services[0]}" "${services[1]}"; else netns_heal "${services[0]}" "${services[1]}"; fi ;;
  *) die "usage: $0 up|down|status|urls [service…] | stop-one|start-one|pid NAME | netns-cut|netns-heal A B" ;;
esac
