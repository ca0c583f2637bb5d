#!/usr/bin/env bash
# One idempotent set-up for a fresh Debian 12 / Ubuntu 24.04: used by `make demo`, `make test`,
# the Vagrantfile and CI. Installs only what is missing, so a second run takes seconds.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TESTBED_VENV:-$HERE/.venv}"
APT_PACKAGES=(mininet ethtool iproute2 iperf3 iputils-ping traceroute tshark mptcpize
              gcc python3-venv python3-dev zlib1g-dev bridge-utils procps
              munge slurmctld slurmd slurm-client)  # a local Slurm: scripts/slurm_local.sh
# vagrant only for `vagrant validate` in CI and for users who build the VM; chromium only for the
# test that renders report.html headless (tests/test_html_report.py); never recommends.
OPTIONAL_APT=(vagrant chromium)

log() { printf 'setup: %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "setup: must run as root (sudo make test / sudo make demo)" >&2
    exit 1
fi

missing=()
for pkg in "${APT_PACKAGES[@]}" "${OPTIONAL_APT[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -qq
    for pkg in "${missing[@]}"; do
        if printf '%s\n' "${OPTIONAL_APT[@]}" | grep -qx "$pkg"; then
            apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null \
                || log "optional package $pkg could not be installed; the tests that need it will skip"
        else
            apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
        fi
    done
else
    log "Debian packages present"
fi

# The system interpreter is ~1.7x faster than pyenv's on byte crunching: build the venv from it.
PY=/usr/bin/python3
[ -x "$PY" ] || PY="$(command -v python3)"
if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv $VENV from $PY"
    "$PY" -m venv "$VENV"
fi
# The stamp covers what the install builds: the metadata and the C extensions' sources (setup.py
# builds them in place; a changed source needs a rebuild).
stamp="$VENV/.installed-$(cat "$HERE/pyproject.toml" "$HERE/setup.py" "$HERE"/switch/*.c \
    "$HERE"/endpoint/*.c 2>/dev/null | sha1sum | cut -c1-12)"
if [ ! -e "$stamp" ]; then
    log "installing the project and its test extras into $VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e "$HERE[test]"
    rm -f "$VENV"/.installed-*
    touch "$stamp"
else
    log "venv up to date"
fi
# `testbed` on PATH for sudo users and labs.
ln -sf "$VENV/bin/testbed" /usr/local/bin/testbed
log "ready: $VENV/bin/testbed"
