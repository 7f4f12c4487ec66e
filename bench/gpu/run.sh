#!/usr/bin/env bash
# The GPU check from the bundle alone, offline: bash gpu-bundle/run.sh OUT
#
#   PYTHON=python3.12 bash gpu-bundle/run.sh /tmp/gpu-out
#
# Installs the bundle's wheels into a temporary prefix (pip --no-index: no network),
# checks that ffcv's extension loads with the bundle's OpenCV and turbojpeg, then runs
# `python -m bench.gpu.check` from the bundle's copy of the project. Without a GPU it
# runs the CPU simulation of the device stage and says that the CUDA steps were skipped.
# One line per step, with seconds; everything else goes to OUT/run.log. Exit status:
# 0 when every step passed.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ $# -ne 1 ]; then
  echo "usage: [PYTHON=python3] bash $0 OUT" >&2
  exit 2
fi
PYTHON="${PYTHON:-python3}"
mkdir -p "$1" && OUT="$(cd "$1" && pwd)"
PREFIX="$(mktemp -d "${TMPDIR:-/tmp}/ffcv-pairs-gpu.XXXXXX")"
trap 'rm -rf "$PREFIX"' EXIT
LOG="$OUT/run.log"
: >"$LOG"
START=$SECONDS

step() {  # step NAME COMMAND...: run, log, print one line
  local name="$1" t0=$SECONDS rc
  shift
  echo "== $name: $*" >>"$LOG"
  "$@" >>"$LOG" 2>&1
  rc=$?
  printf 'gpu-bundle: %-10s %s (%d s)\n' "$name" "$([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc, see $LOG)")" $((SECONDS - t0))
  return $rc
}

step python "$PYTHON" -c 'import sys, torch, numba, numpy; print(sys.version, torch.__version__, numba.__version__, numpy.__version__, "cuda:", torch.cuda.is_available())' || exit 1
step install "$PYTHON" -m pip install --no-index --no-deps --no-compile --disable-pip-version-check \
  --target "$PREFIX/site" "$HERE"/wheels/*.whl || exit 1
export PYTHONPATH="$PREFIX/site:$HERE/project"
export NUMBA_CACHE_DIR="$PREFIX/numba-cache"
# Every library the extension loads comes from the bundle, except the C and C++ runtimes.
check_extension() {
  local so="$PREFIX/site/ffcv/_libffcv.abi3.so"
  ldd "$so" || return 1
  if ldd "$so" | grep "=>" | grep -v -E "$PREFIX/site/(ffcv/\.\./)?ffcv\.libs/|/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so|ld-linux"; then
    echo "the libraries above resolve outside the bundle"
    return 1
  fi
  "$PYTHON" -c 'import ffcv_pairs, ffcv; from ffcv.libffcv import imdecode, resize_crop; print("ffcv from", ffcv.__file__)'
}
if ! step extension check_extension; then
  # OpenCV needs GLIBCXX_3.4.30 (GCC 12): try Debian 12's C++ runtime in front of the machine's.
  export LD_PRELOAD="$HERE/fallback/libstdc++.so.6:$HERE/fallback/libgcc_s.so.1"
  step extension+ check_extension || exit 1
  echo "gpu-bundle: the machine's libstdc++ is older than GCC 12's: running with LD_PRELOAD=$LD_PRELOAD"
fi
cd "$HERE/project" || exit 1
step check "$PYTHON" -m bench.gpu.check --out "$OUT"
rc=$?
tail -n 3 "$LOG" | sed 's/^/  /'
echo "gpu-bundle: done in $((SECONDS - START)) s; report and log in $OUT"
exit $rc
