#!/usr/bin/env bash
# Checks that a fresh Debian 12 machine can use xgrad, on a machine that may have anything
# installed: builds a pristine Debian 12 minbase root with debootstrap, clones the committed HEAD
# into it, runs the README's first command there (scripts/quickstart.sh: install, build, train
# the toy encoder), then configures every tree the second command builds (scripts/test.sh
# --configure-only: Release with tests, ASan + UBSan, TSan, the clang fuzz tree). A package that
# setup.sh forgets fails one of those steps; the failing step is named and the end of its log
# printed (xgrad's CMake names the Debian package it could not find).
#
# Needs root (debootstrap, chroot, mounts) and Debian's archive. Only downloaded .deb files are
# kept between runs, in $XGRAD_FRESH_CACHE; the root itself is made anew and removed each run.
#   XGRAD_FRESH_CACHE    .deb cache (default /var/cache/xgrad-fresh-machine)
#   XGRAD_FRESH_MIRROR   Debian archive (default http://deb.debian.org/debian)
#   XGRAD_FRESH_SECURITY Debian security archive (default http://deb.debian.org/debian-security)
#   XGRAD_FRESH_CCACHE   this machine's ccache folder, lent to the root's build (default: ccache's
#                        own, when ccache is installed here; "none" to build from nothing)
#   XGRAD_FRESH_KEEP=1   keep the root (its path is printed) to look around in; otherwise it is
#                        removed, and only the logs of a failed run are kept
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$XGRAD_ROOT"

cache=${XGRAD_FRESH_CACHE:-/var/cache/xgrad-fresh-machine}
mirror=${XGRAD_FRESH_MIRROR:-http://deb.debian.org/debian}
security=${XGRAD_FRESH_SECURITY:-http://deb.debian.org/debian-security}

if ((EUID != 0)); then
  echo "fresh_machine_check: needs root (debootstrap and chroot); run it with sudo" >&2
  exit 2
fi

root=$(mktemp -d /var/tmp/xgrad-fresh-root.XXXXXX)
logs=$root.logs
mkdir -p "$cache" "$logs"

# What is mounted into the root, innermost first.
mounts=(root/.cache/ccache var/cache/apt/archives dev/pts dev proc sys)
unmount_all() {
  local m
  for m in "${mounts[@]}"; do
    mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m"
  done
  return 0
}
failed=0
cleanup() {
  unmount_all
  if [[ "${XGRAD_FRESH_KEEP:-0}" == 1 ]]; then
    echo "fresh_machine_check: the root is kept at $root, the logs at $logs"
    return
  fi
  local m
  for m in "${mounts[@]}"; do
    if mountpoint -q "$root/$m" 2>/dev/null; then  # never remove what a mount lends the root
      echo "fresh_machine_check: $root/$m is still mounted; the root is left at $root" >&2
      return
    fi
  done
  rm -rf "$root"  # about 2 GB
  if ((failed)); then
    echo "fresh_machine_check: the logs are kept at $logs"
  else
    rm -rf "$logs"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # so that cleanup runs

# logged NAME COMMAND...: runs COMMAND with its output in $logs/NAME.log; on failure prints the
# log's last lines, which name what was missing.
logged() {
  local name=$1
  shift
  if ! "$@" >"$logs/$name.log" 2>&1; then
    echo "fresh_machine_check: step '$name' failed; the end of its log ($logs/$name.log):" >&2
    tail -n 40 "$logs/$name.log" >&2
    failed=1
    return 1
  fi
}

# in_root COMMAND: runs a bash command in the root as root, with a clean environment but for
# the OpenBLAS settings this machine's CPU needs.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE} ${OPENBLAS_L2_SIZE:+OPENBLAS_L2_SIZE=$OPENBLAS_L2_SIZE} \
    DEBIAN_FRONTEND=noninteractive /bin/bash -c "$1" </dev/null
}

install_debootstrap() {
  command -v debootstrap >/dev/null && return 0
  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap
}

# The root's build compiles through this machine's ccache (setup.sh installs ccache there too, and
# the clone's paths are relative to its root): the same compiler from the same packages then gets
# the objects this machine compiled, and the quickstart phase takes about a minute instead of
# several. It checks no less: a header that a missing package should provide is not found by the
# preprocessor on a cache miss, nor by ccache's manifest on a hit, so that compile fails as before;
# every link and the training run are real.
lend_ccache() {
  local dir=${XGRAD_FRESH_CCACHE:-}
  if [[ -z "$dir" ]] && command -v ccache >/dev/null; then dir=$(ccache -k cache_dir); fi
  [[ -n "$dir" && "$dir" != none ]] || return 0
  mkdir -p "$dir" "$root/root/.cache/ccache"
  mount --bind "$dir" "$root/root/.cache/ccache"
  echo "fresh_machine_check: the root's build compiles through this machine's ccache ($dir)"
}

make_root() {
  debootstrap --variant=minbase --cache-dir="$cache" bookworm "$root" "$mirror"
  cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  # A root made to be thrown away: dpkg need not sync each file it unpacks (as debootstrap does
  # while it builds the root), which was most of the time the README's first command spent
  # installing packages there. What gets installed is unchanged.
  echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/xgrad-fresh-root"
  mount -t proc proc "$root/proc"
  mount -t sysfs sysfs "$root/sys"
  mount --bind /dev "$root/dev"
  mount --bind /dev/pts "$root/dev/pts"
  # Downloads only: apt in the root keeps its .deb files in the cache, so the next run fetches
  # nothing it already has; what is installed is decided by the root's own apt-get runs.
  mount --bind "$cache" "$root/var/cache/apt/archives"
  lend_ccache
  # debootstrap's minbase has neither git nor sudo; the clone comes from this machine's git.
  git clone --quiet --no-hardlinks "$XGRAD_ROOT" "$root/root/xgrad"
  echo "fresh_machine_check: $(git -C "$root/root/xgrad" log -1 --format='%h %s' | cut -c1-100)"
}

phase "install debootstrap (this machine)" logged install-debootstrap install_debootstrap
phase "debootstrap Debian 12 minbase" logged debootstrap make_root
# The README's first command, as a new user runs it (root: no sudo needed).
phase "fresh root: README's first command" logged quickstart in_root 'cd /root/xgrad && bash scripts/quickstart.sh'
phase "fresh root: configure the test trees" logged configure in_root 'cd /root/xgrad && bash scripts/test.sh --configure-only'
# What ran in the root: its phases' wall times, and the toy encoder's last lines.
sed -n '/^==> wall time per phase/,$p' "$logs/quickstart.log" "$logs/configure.log" | grep '^    ' | sed 's/^    /    fresh root: /'
sed -n '/^==> run examples\/train_toy_encoder$/,/^==> run examples\/train_toy_encoder:/p' "$logs/quickstart.log" |
  grep -E '^held-out accuracy|^wall time' | sed 's/^/    toy encoder: /'
print_phase_times
echo "==> fresh machine check passed: a pristine Debian 12 root installed, built and trained, and configured every test tree"
