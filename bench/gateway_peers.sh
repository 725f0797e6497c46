# Sourced by bench/gateway.sh and bench/vs_collector.sh: the gateway
# pipeline's peers on CPU 1. Needs OUT (a scratch directory), PIDS (an
# array the caller kills on exit) and wait_port. `gateway_peers ROOT_ANSWER`:
# a throwaway CA and a server certificate it signed ($OUT/ca.crt,
# $OUT/tls.crt, $OUT/tls.key; webpki refuses a self-signed certificate as
# the server's own), NGINX on 127.0.0.1:13100 answering Loki's push API with
# 204 and every other path with 200 and ROOT_ANSWER (`[]` for Alertmanager's
# API, `{}` for OTLP/HTTP), VictoriaMetrics on 127.0.0.1:18428.
gateway_peers() {
  local root_answer=$1
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=bench-ca \
    -keyout "$OUT/ca.key" -out "$OUT/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$OUT/tls.key" -out "$OUT/tls.csr" >/dev/null 2>&1
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$OUT/san.ext"
  openssl x509 -req -in "$OUT/tls.csr" -CA "$OUT/ca.crt" -CAkey "$OUT/ca.key" -CAcreateserial \
    -days 1 -extfile "$OUT/san.ext" -out "$OUT/tls.crt" >/dev/null 2>&1
  cat > "$OUT/nginx.conf" <<NGINX
daemon off; worker_processes 1; pid $OUT/nginx.pid; error_log $OUT/nginx-error.log;
events {}
http {
  access_log off; client_body_temp_path $OUT/body; client_max_body_size 64m;
  server {
    listen 127.0.0.1:13100;
    location /loki/api/v1/push { return 204; }
    location / { return 200 '$root_answer'; }
  }
}
NGINX
  taskset -c 1 nginx -p "$OUT" -c "$OUT/nginx.conf" & PIDS+=($!)
  taskset -c 1 victoria-metrics -storageDataPath "$OUT/vm" -httpListenAddr 127.0.0.1:18428 \
    -loggerLevel ERROR > "$OUT/vm.log" 2>&1 & PIDS+=($!)
  wait_port 13100 && wait_port 18428
}
