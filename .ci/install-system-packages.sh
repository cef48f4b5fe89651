#!/usr/bin/env bash
# Install the Debian packages the project needs (listed in .ci/system-packages.txt).
# Idempotent: only missing packages are installed. Needs root (or sudo) and apt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^\s*$/d' "$here/system-packages.txt" | tr -s ' \t' '\n' | sed '/^$/d')
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all present (${wanted[*]})"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "system packages missing: ${missing[*]} (no apt-get here: install them with your package manager)" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "system packages: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
