#!/usr/bin/env bash
# Install the Debian packages npusim builds and tests with, if any are missing.
# Idempotent: when everything is present it installs nothing and says so in one line.
# Non-interactive; uses sudo when not run as root.
set -euo pipefail

packages=(
  cmake make gcc pkg-config
  libsimgrid-dev      # SimGrid 3.32, C API
  libgsl-dev          # GSL: seeded random generators, statistics
  libconfig-dev       # libconfig: scenario and preset files
  libcriterion-dev    # Criterion: the test framework
  zlib1g-dev          # zlib: traces written gzip-compressed (--trace FILE.gz)
  libopenmpi-dev      # Open MPI: sweeps spread over ranks (mpirun -n K npusim sweep); optional to build
  openmpi-bin         # mpirun, for the MPI sweep test
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
apt_install() {
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}
if ! apt_install; then
  # A fresh machine may have stale or empty package lists.
  "${sudo[@]}" apt-get update -q
  apt_install
fi
