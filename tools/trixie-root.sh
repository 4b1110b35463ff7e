#!/usr/bin/env bash
# Shell functions shared by tools/check-libtorch2.sh and tools/check-cuda-build.sh:
# a Debian trixie root made with debootstrap (kept under the repository's git-ignored
# .cache/ and reused on later runs), commands run inside it, and the project's sources
# copied into it. Source this file; it needs root and a host that reaches a Debian archive.

# The archive this machine's own apt uses (the first deb URI that is not a security
# mirror), so that the root is fetched from the same place the host's packages come from.
trixie_mirror() {
  if [ -n "${TIERGEN_DEBIAN_MIRROR:-}" ]; then echo "$TIERGEN_DEBIAN_MIRROR"; return; fi
  local uri
  uri=$( { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'
           cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
             sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p'
         } | grep -v -e '-security' -e '^$' | head -n 1)
  if [ -z "$uri" ]; then
    echo "no Debian archive found in /etc/apt/sources.list{,.d}; set TIERGEN_DEBIAN_MIRROR" >&2
    return 1
  fi
  echo "${uri%/}"
}

trixie_need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "$1 needs root (debootstrap, chroot and mounts); run it with sudo" >&2
    exit 2
  fi
}

# Prints "<phase> <seconds>" lines to the timing file named by $TRIXIE_TIMINGS.
trixie_time() {
  local phase=$1; shift
  local start=$SECONDS
  "$@"
  local rc=$?
  [ -n "${TRIXIE_TIMINGS:-}" ] && echo "$phase $((SECONDS - start))s" >> "$TRIXIE_TIMINGS"
  return $rc
}

# trixie_make_root ROOT COMPONENTS: debootstrap once; later runs find ROOT/.tiergen-root.
trixie_make_root() {
  local root=$1 components=$2 mirror
  mirror=$(trixie_mirror) || return 1
  if [ -f "$root/.tiergen-root" ]; then
    echo "reusing the trixie root $root"
  else
    command -v debootstrap >/dev/null 2>&1 ||
      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; } || return 1
    rm -rf "$root"
    mkdir -p "$root"
    echo "debootstrap trixie into $root from $mirror"
    debootstrap --variant=minbase --components="$components" trixie "$root" "$mirror" || return 1
    touch "$root/.tiergen-root"
  fi
  echo "deb $mirror trixie ${components//,/ }" > "$root/etc/apt/sources.list"
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  # No services start inside the root.
  printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
}

# Mounts /proc, /sys and /dev into ROOT until trixie_unmount (or the caller's exit trap).
trixie_mount() {
  local root=$1 d
  for d in proc sys dev; do
    mountpoint -q "$root/$d" && continue
    case $d in
      proc) mount -t proc proc "$root/proc" ;;
      sys) mount -t sysfs sysfs "$root/sys" ;;
      dev) mount --bind /dev "$root/dev" ;;
    esac
  done
}

trixie_unmount() {
  local root=$1 d
  for d in dev sys proc; do
    mountpoint -q "$root/$d" && umount "$root/$d"
  done
  return 0
}

trixie_run() {
  local root=$1; shift
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

# trixie_install ROOT PACKAGE...: installs what is not installed yet.
trixie_install() {
  local root=$1; shift
  local missing=() p
  for p in "$@"; do
    trixie_run "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && { echo "packages already installed in $root"; return 0; }
  echo "installing in $root: ${missing[*]}"
  trixie_run "$root" apt-get update -q &&
    trixie_run "$root" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# trixie_copy_sources REPO ROOT DEST: the working tree's tracked and untracked (not
# ignored) files. Only files whose content differs from the copy already there are
# replaced (and so get a new modification time): a reused build folder then rebuilds
# exactly what changed, even when the tree was switched to an older checkout.
trixie_copy_sources() {
  local repo=$1 root=$2 dest=$3 staging
  staging=$(mktemp -d)
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
     while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
     tar --null -T - -cf -) | tar -xf - -C "$staging"
  mkdir -p "$root/$dest"
  (cd "$staging" && find . -type f -print0) | while IFS= read -r -d '' f; do
    if ! cmp -s "$staging/$f" "$root/$dest/$f"; then
      mkdir -p "$(dirname "$root/$dest/$f")"
      cp "$staging/$f" "$root/$dest/$f"
    fi
  done
  # Files gone from the tree are gone from the copy.
  (cd "$root/$dest" && find . -type f -print0) | while IFS= read -r -d '' f; do
    [ -e "$staging/$f" ] || rm -f "$root/$dest/$f"
  done
  rm -rf "$staging"
}
