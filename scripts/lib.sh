# Shared by the scripts in this folder: where things live and how to build. Source it; don't run it.
set -euo pipefail

GPUEX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export GPUEX_ROOT
# ccache hits survive a clone to another folder (CI clones to a path we don't choose).
export CCACHE_BASEDIR="$GPUEX_ROOT"
# With -g, ccache would hash the build folder too (it lands in the debug info): without that, a
# clone elsewhere still hits the cache (its debug info then names the first folder; harmless).
export CCACHE_NOHASHDIR=1

die() { echo "error: $*" >&2; exit 1; }
say() { echo "==> $*" >&2; }

# gpuex_build TYPE DIR [TARGETS...]: configure (once) and build with Ninja. GPUEX_CMAKE_ARGS, if set, adds
# cache settings at the first configure (e.g. -DGPUEX_SANITIZE=thread; such a build gets a folder of its own).
gpuex_build() {
  local type=$1 dir=$2; shift 2
  if [ ! -f "$dir/build.ninja" ] || ! grep -q "CMAKE_BUILD_TYPE:STRING=$type" "$dir/CMakeCache.txt" 2>/dev/null; then
    say "configuring $type build in ${dir#"$GPUEX_ROOT"/}"
    # shellcheck disable=SC2086 # GPUEX_CMAKE_ARGS is a list of words
    cmake -S "$GPUEX_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" ${GPUEX_CMAKE_ARGS:-} >/dev/null \
      || die "cmake configure failed (see the output above)"
  fi
  say "building ($type) in ${dir#"$GPUEX_ROOT"/}"
  ninja -C "$dir" "$@" || die "build failed (see the compiler output above)"
}

# gpuex_pg_claim WHAT wait|refuse: holds the lock of cluster $GPUEX_PG_NAME (fd 9) until this script
# ends, so that two runs never share a cluster (the second would drop the first's databases or stop
# the cluster under it). `refuse` dies when another run holds the lock; `wait` waits for it to end.
gpuex_pg_claim() {
  local what=$1 mode=$2 lock
  lock=$("$GPUEX_ROOT/scripts/pg" lockfile) || exit 1
  exec 9>>"$lock" || die "cannot open the lock file $lock"
  flock -n 9 && return 0
  [ "$mode" = wait ] || die "$what is already running for this checkout (it holds $lock): stop that one first"
  say "another $what of this checkout is running (it holds $lock): waiting for it to end"
  flock 9
}

# gpuex_pg_start VAR: starts cluster $GPUEX_PG_NAME (hold gpuex_pg_claim first) and puts its URL in
# VAR. gpuex_pg_stop stops it only if this script started it: a cluster someone started by hand
# (scripts/pg start) stays up.
gpuex_pg_started=0
gpuex_pg_start() {
  "$GPUEX_ROOT/scripts/pg" status >/dev/null 2>&1 || gpuex_pg_started=1
  local url
  # 9>&-: PostgreSQL outlives this script and must not keep the lock.
  url=$("$GPUEX_ROOT/scripts/pg" start 9>&-) || exit 1
  printf -v "$1" '%s' "$url"
}
gpuex_pg_stop() {
  if [ "$gpuex_pg_started" = 1 ]; then "$GPUEX_ROOT/scripts/pg" stop; fi
}
