#!/bin/sh
# The demo package's service commands (cluster.json.mustache runs `ctl.sh SERVICE`), as an image's
# /opt/app/bin/ctl.sh would be. The node's metadata arrives as APPCENTER_* variables, the file
# $METADATA_FILE and the endpoint $METAD_URL; $APPCTL keeps the node's server running (its systemctl).
# Every command appends "<time> <service> <role> <sid> <operation>" to the node's lifecycle.log
# and to env.journal when set, so the lifecycle order can be read from what the nodes really ran.
set -u
service="$1"
role="${APPCENTER_HOST_ROLE:-?}"
sid="${APPCENTER_HOST_SID:-?}"
ip="${APPCENTER_HOST_IP:-127.0.0.1}"
port="${APPCENTER_ENV_PORT:-8080}"

note() {
  line="$(date +%s.%N) $service $role $sid ${APPCENTER_OPERATION:-} $*"
  echo "$line" >> "$APPCENTER_NODE_DIR/lifecycle.log"
  if [ -n "${APPCENTER_ENV_JOURNAL:-}" ]; then echo "$line" >> "$APPCENTER_ENV_JOURNAL"; fi
}

delay="${APPCENTER_ENV_DELAY:-0}"
case "$delay" in 0|0.0|"") ;; *) sleep "$delay" ;; esac

if [ "$service" = "${APPCENTER_ENV_FAIL_SERVICE:-}" ]; then
  fail_sid="${APPCENTER_ENV_FAIL_SID:-0}"
  if [ "$fail_sid" = "0" ] || [ "$fail_sid" = "$sid" ]; then
    note "failed"
    echo "demo: $service fails on $role $sid (env.fail_service)" >&2
    exit "${APPCENTER_ENV_FAIL_CODE:-1}"
  fi
fi

case "$service" in
  init)
    mkdir -p "$APPCENTER_NODE_DIR/data"
    note ;;
  token)
    note
    echo "tok-$role-$sid" ;;
  start)
    note
    exec $APPCTL start server --ready "$ip:$port" -- "$APPCENTER_PYTHON" "$APPCENTER_PACKAGE_DIR/bin/server.py" "$ip" "$port" ;;
  restart_server)
    note
    exec $APPCTL start server --ready "$ip:$port" -- "$APPCENTER_PYTHON" "$APPCENTER_PACKAGE_DIR/bin/server.py" "$ip" "$port" ;;
  check)
    # cheap, as a check every few seconds must be: the server's pid is alive ($APPCTL status server also tells)
    pid=$(cat "$APPCENTER_NODE_DIR/server.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null ;;
  measure)
    requests=$(cat "$APPCENTER_NODE_DIR/requests.log" 2>/dev/null | wc -l)
    echo "{\"requests\": $requests}" ;;
  stop)
    note
    exec $APPCTL stop server ;;
  scale_out)
    if grep -q '"adding-hosts"' "$METADATA_FILE"; then note "adding-hosts"; else note "no-adding-hosts"; fi ;;
  scale_in)
    if grep -q '"deleting-hosts"' "$METADATA_FILE"; then note "deleting-hosts"; else note "no-deleting-hosts"; fi ;;
  reload)
    note "greeting=${APPCENTER_ENV_GREETING:-}" ;;
  greet)
    note "params=${APPCENTER_SERVICE_PARAMS:-}" ;;
  *)
    note ;;
esac
