# The setups bench/gateway_vs_nginx.sh and bench/gateway_instructions.sh share, sourced by both:
# an nginx `return 200` upstream, nginx as a proxy in front of it with a limit_req that never
# rejects, and sluice's configurations with limits active that never reject. Sourcing makes $work,
# a temporary directory, and pids, the processes to kill: both go when the script exits.

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# write_upstream_conf DIR PORT: the upstream, one worker.
write_upstream_conf() {
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<CONF
worker_processes 1;
pid $1/nginx.pid;
error_log $1/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:$2; location / { return 200 "ok\n"; } }
}
CONF
}

# write_proxy_conf DIR PORT UPSTREAM_PORT PROCESS_LINES: nginx proxying over a keep-alive pool
# with a limit_req; PROCESS_LINES says how it runs ("worker_processes N;", or "master_process off;
# daemon off;" for one process).
write_proxy_conf() {
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<CONF
$4
pid $1/nginx.pid;
error_log $1/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  limit_req_zone \$binary_remote_addr zone=bench:10m rate=10000000r/s;
  upstream app { server 127.0.0.1:$3; keepalive 64; }
  server {
    listen 127.0.0.1:$2;
    location / {
      limit_req zone=bench burst=10000000 nodelay;
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
CONF
}

# write_sluice_yaml FILE UPSTREAM_PORT [one]: every kind of limit (system, interface and grant, and
# an in-flight limit), all decided for every request; with "one", only the system's limit.
write_sluice_yaml() {
  cat >"$1" <<CONF
access_log: "off"
upstreams:
  - {name: app, targets: [127.0.0.1:$2], timeout: 5s}
systems:
  - key: bench
    interfaces: [api]
    limits: [{algorithm: sliding_window, limit: 100000000, period: 1s}]
CONF
  if [[ ${3:-} == one ]]; then
    printf 'interfaces:\n  - {id: api, path: /api/*, upstream: app}\n' >>"$1"
    return
  fi
  cat >>"$1" <<CONF
interfaces:
  - id: api
    path: /api/*
    upstream: app
    concurrency: 100000
    limits: [{algorithm: token_bucket, capacity: 100000000, rate: 100000000, per: 1s}]
grants:
  - {system: bench, interface: api, limits: [{algorithm: fixed_window, limit: 1000000000, period: 1h}]}
CONF
}
