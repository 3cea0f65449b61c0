#!/usr/bin/env bash
# Ensure the system packages the suite needs: PostgreSQL server binaries, a Java 17+ runtime
# (PySpark), Chromium (the UI's browser test), Redis (the Celery broker of the topology
# test, tests/e2e) and Prometheus (promtool for the alert rules' unit tests, the server for
# the alerts' end-to-end test, tests/observability). Installs missing ones with apt-get when
# running as root; otherwise names what to install and fails.
set -euo pipefail

missing=()
have_pg() { ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; }
have_java() {
  command -v java >/dev/null 2>&1 || return 1
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [ -n "$v" ] && [ "$v" -ge 17 ]
}
have_chromium() { [ -x /usr/bin/chromium ]; }
have_redis() { command -v redis-server >/dev/null 2>&1; }
have_prometheus() { command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; }

have_pg || missing+=(postgresql)
have_java || missing+=(openjdk-17-jre-headless)
have_chromium || missing+=(chromium)
have_redis || missing+=(redis-server)
have_prometheus || missing+=(prometheus)

if [ ${#missing[@]} -eq 0 ]; then
  echo "system-deps: found PostgreSQL ($(ls -d /usr/lib/postgresql/*/bin | tail -1)), Java ($(java -version 2>&1 | head -1)), Chromium (/usr/bin/chromium), Redis ($(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')), Prometheus ($(promtool --version 2>&1 | head -1 | sed 's/.*version \([^ ]*\).*/\1/'))"
  exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # the Debian package starts a cluster of its own; the suite runs its own servers
  if printf '%s\n' "${missing[@]}" | grep -qx postgresql; then
    service postgresql stop >/dev/null 2>&1 || true
  fi
  # the same for Redis: the topology test starts its own redis-server
  if printf '%s\n' "${missing[@]}" | grep -qx redis-server; then
    service redis-server stop >/dev/null 2>&1 || true
  fi
  # and Prometheus: the end-to-end test starts its own server
  if printf '%s\n' "${missing[@]}" | grep -qx prometheus; then
    service prometheus stop >/dev/null 2>&1 || true
  fi
  have_pg && have_java && have_chromium && have_redis && have_prometheus || { echo "system-deps: install failed" >&2; exit 1; }
  echo "system-deps: installed ${missing[*]}"
else
  echo "system-deps: missing ${missing[*]}." >&2
  echo "  Install them (Debian/Ubuntu): sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
