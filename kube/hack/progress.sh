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
