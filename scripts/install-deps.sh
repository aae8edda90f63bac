#!/usr/bin/env bash
# Installs the Debian packages seer builds and tests with (only those missing); chromium
# runs the chat page's test (tests/serve/test_chat_page.py).
#
# The libFuzzer runtime's package is named after the clang version of the running release
# (libclang-rt-14-dev on Debian 12, libclang-rt-19-dev on 13), so it is looked up rather
# than named here. On a fresh machine apt is often busy (unattended-upgrades, cloud-init):
# the script waits for apt's and dpkg's locks, up to APT_LOCK_WAIT seconds (default 600),
# saying what it waits for, instead of failing at once.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libcmocka-dev libjansson-dev libpcre2-dev clang libomp-dev
      libmicrohttpd-dev python3 python3-venv python3-pip chromium)
# SEER_BENCH_DEPS=1: also the text scripts/long-prompt.sh builds benchmark prompts from.
[[ ${SEER_BENCH_DEPS:-0} == 1 ]] && pkgs+=(bible-kjv bible-kjv-text)
lock_wait=${APT_LOCK_WAIT:-600}
locks=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock
       /var/cache/apt/archives/lock)

# Which process holds a lock on file (POSIX or flock, from /proc/locks), "" when none.
lock_holder() {
  [[ -e $1 && -r /proc/locks ]] || return 0
  local dev ino id
  dev=$(stat -c %d "$1") ino=$(stat -c %i "$1")
  id=$(printf '%02x:%02x:%d' $(((dev >> 8) & 0xfff)) $(((dev & 0xff) | ((dev >> 12) & 0xfff00))) "$ino")
  awk -v id="$id" '$6 == id { print $5; exit } $7 == id { print $6; exit }' /proc/locks
}

# Waits until none of apt's and dpkg's locks is held, printing the holder every 10 s.
wait_for_apt() {
  local start=$SECONDS last=-10 busy pid f
  while :; do
    busy=""
    for f in "${locks[@]}"; do
      pid=$(lock_holder "$f")
      if [[ -n $pid ]]; then
        busy="$f (held by pid $pid: $(cat "/proc/$pid/comm" 2>/dev/null || echo '?'))"
        break
      fi
    done
    [[ -z $busy ]] && return 0
    if ((SECONDS - start >= lock_wait)); then
      echo "install-deps.sh: gave up after ${lock_wait}s waiting for $busy" >&2
      return 1
    fi
    if ((SECONDS - last >= 10)); then
      echo "install-deps.sh: waiting for $busy ($((SECONDS - start))s of ${lock_wait}s)" >&2
      last=$SECONDS
    fi
    sleep 1
  done
}

# apt-get, after waiting for the locks; dpkg's lock taken between the wait and the call is
# waited for by apt itself (DPkg::Lock::Timeout), the lists lock by trying again.
apt_get() {
  local try
  for try in 1 2 3; do
    wait_for_apt
    if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$lock_wait" "$@"; then
      return 0
    fi
    echo "install-deps.sh: apt-get $1 failed (try $try of 3)" >&2
  done
  return 1
}

# The libFuzzer runtime for the clang that is (or will be) installed.
fuzzer_pkg() {
  local n="" p
  if command -v clang >/dev/null; then
    n=$(clang -dumpversion | cut -d. -f1)
  else
    n=$(apt-cache depends clang 2>/dev/null | sed -n 's/.*Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -1)
  fi
  for p in ${n:+libclang-rt-$n-dev} libclang-rt-dev ${n:+libclang-common-$n-dev}; do
    if dpkg -s "$p" >/dev/null 2>&1 || apt-cache show "$p" >/dev/null 2>&1; then
      echo "$p"
      return 0
    fi
  done
}

missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
fz=$(fuzzer_pkg || true)
if [[ -n $fz ]] && ! dpkg -s "$fz" >/dev/null 2>&1; then missing+=("$fz"); fi
[[ ${#missing[@]} -eq 0 && -n $fz ]] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "install-deps.sh: installing ${missing[*]:-the libFuzzer runtime}" >&2
apt_get update -qq
# The package lists are fresh now: look the fuzzer runtime up again if it was not found.
if [[ -z $fz ]]; then
  fz=$(fuzzer_pkg || true)
  if [[ -z $fz ]]; then
    echo "install-deps.sh: no libFuzzer runtime package found for this release's clang" >&2
    exit 1
  fi
  dpkg -s "$fz" >/dev/null 2>&1 || missing+=("$fz")
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0
apt_get install -y -qq --no-install-recommends "${missing[@]}"
