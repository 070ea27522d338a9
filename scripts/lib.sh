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

# gpuex_build TYPE DIR [TARGETS...]: configure (once) and build with Ninja.
gpuex_build() {
  local type=$1 dir=$2; shift 2
  if [ ! -f "$dir/build.ninja" ] || ! grep -q "CMAKE_BUILD_TYPE:STRING=$type" "$dir/CMakeCache.txt" 2>/dev/null; then
    say "configuring $type build in ${dir#"$GPUEX_ROOT"/}"
    cmake -S "$GPUEX_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" >/dev/null \
      || die "cmake configure failed (see the output above)"
  fi
  say "building ($type) in ${dir#"$GPUEX_ROOT"/}"
  ninja -C "$dir" "$@" || die "build failed (see the compiler output above)"
}
