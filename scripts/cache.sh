# Sourced by toolchain.sh and image.sh. Built binaries and baked images outlive the clone, as Go's
# build cache does, in one folder every clone on this machine shares: an entry is written whole
# under a lock and read under it, so two clones never see each other's half-written entry.
CACHE="${CLUSTERFORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clusterforge}"

# cache_put ENTRY SRC=NAME...: the entry $CACHE/ENTRY becomes a folder holding each SRC (a file or
# folder) as NAME, replacing what it held.
cache_put() {
  local entry="$CACHE/$1" staging pair
  shift
  mkdir -p "$(dirname "$entry")"
  staging=$(mktemp -d "$entry.new.XXXXXX")
  for pair in "$@"; do cp -a "${pair%%=*}" "$staging/${pair#*=}"; done
  (flock 8 && rm -rf "$entry" && mv "$staging" "$entry") 8>"$CACHE/.lock"
}

# cache_get ENTRY NAME DEST: copies NAME of the entry to DEST; fails when the entry has none.
cache_get() {
  local from="$CACHE/$1/$2"
  mkdir -p "$CACHE"
  (flock -s 8 && [ -e "$from" ] && rm -rf "$3" && cp -a "$from" "$3") 8>"$CACHE/.lock"
}

# cache_keep DIR N: keeps the N most recently used entries of $CACHE/DIR (cache_get touches one).
cache_keep() {
  (flock 8 && find "$CACHE/$1" -mindepth 1 -maxdepth 1 -type d ! -name '*.new.*' -printf '%T@ %p\n' |
    sort -rn | tail -n +"$(($2 + 1))" | cut -d' ' -f2- | xargs -r rm -rf) 8>"$CACHE/.lock"
}
