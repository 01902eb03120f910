# Sourced by the asset scripts. progress WHAT CMD...: run CMD and print a
# line to stderr every 30 s while it runs, so a 9-minute build is not
# silence; the lines start with the script's name.
progress() {
  local what=$1; shift
  local start=$SECONDS name
  name=$(basename "$0" .sh)
  "$@" & local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    if (( (SECONDS - start) % 30 < 5 )) && kill -0 "$pid" 2>/dev/null; then
      echo "$name: building $what... $((SECONDS - start))s" >&2
    fi
  done
  local rc=0
  wait "$pid" || rc=$?
  if (( rc != 0 )); then
    echo "$name: building $what failed (exit $rc)" >&2
    return "$rc"
  fi
  echo "$name: built $what in $((SECONDS - start))s" >&2
}

# cached BIN, for a script that builds one binary into $OUT: when $OUT/BIN
# is built already, print its path and exit; else make $OUT and set tmp to
# a build directory in it, removed when the script exits.
cached() {
  if [[ -x "$OUT/$1" ]]; then
    echo "$OUT/$1"; exit 0
  fi
  mkdir -p "$OUT"
  tmp=$(mktemp -d "$OUT/build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
}
