#!/usr/bin/env bash
# Installs the Debian packages ft builds and tests with, where missing. Root, or sudo.
set -euo pipefail
# chromium: the web page's test drives it headless (tests/server/web.mjs)
pkgs=(build-essential pkg-config libjansson-dev libpcre2-dev libevent-dev clang nodejs npm curl chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs/npm may come from elsewhere (nvm, NodeSource): a working npm is enough
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
