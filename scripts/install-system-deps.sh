#!/usr/bin/env bash
# Install the real components hpcscope's tests start by themselves (Debian 12 packages):
#   slurm-wlm + munge (+ slurmdbd, mariadb-server,   a real one-node Slurm with fake GPU gres
#   slurmrestd)
#   prometheus (promtool), victoria-metrics            PromQL engines, rule tests
#   prometheus-node-exporter                           real node metrics, InfiniBand collector
#   prometheus-alertmanager (amtool)                   alert delivery over the v2 API, config check
#   chromium                                           browser tests (Playwright, executablePath)
#   openssl                                            a self-signed certificate (tests/security)
#   bpftrace                                           hpcscope sensor and its tests (root)
#   strace                                             the sensor's attack test (ptrace of a process)
# Idempotent: installs only what is missing. Services are not left running by the install;
# the tests start and stop what they need.
set -euo pipefail

packages=(slurm-wlm slurmdbd slurmrestd munge mariadb-server prometheus victoria-metrics
          prometheus-node-exporter chromium openssl prometheus-alertmanager
          bpftrace strace)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "system deps: all present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    echo "system deps: missing ${missing[*]} and not root (no sudo): install them, then rerun" >&2
    exit 1
  fi
fi

echo "system deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# keep package scripts from starting daemons on machines with an init system
policy_added=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  policy_added=1
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if [ "$policy_added" -eq 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
echo "system deps: done"
