#!/usr/bin/env bash
# Installs the Debian packages in scripts/deps.txt that are missing. Idempotent; needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t pkgs < <(grep -v '^\s*#' "$here/deps.txt" | sed 's/\s.*//' | grep -v '^$')
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[deps] installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
  # The downloaded .deb files (over a gigabyte with torch and chromium) are not needed again.
  apt-get clean
else
  echo "[deps] all Debian packages present"
fi
