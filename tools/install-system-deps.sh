#!/usr/bin/env bash
# Install the Debian packages amqpscope's live tests, samples and benchmarks need:
#   rabbitmq-server (private brokers, see amqpscope/testing/broker.py),
#   tcpdump (loopback recording, fallback capture helper), tshark (oracle decoder),
#   wireshark-common (dumpcap: sniff's capture helper), libcap2-bin (setcap/getcap: the
#   unprivileged-user sniff test gives dumpcap its capabilities for a test group, then restores it),
#   tcpreplay (tcpreplay/tcprewrite: the replay test and bench/live.py),
#   chromium (headless: the report page checked in a real browser, tests/test_diagnose_report.py).
# Idempotent and quiet: does nothing when everything is already installed.
# The system RabbitMQ service (and epmd) is never left running: amqpscope starts its
# own private broker on other ports (25672+), so the packaged service is stopped and
# disabled after installation. Works with or without systemd (containers).
set -euo pipefail

PKGS=(rabbitmq-server tcpdump tshark wireshark-common libcap2-bin tcpreplay chromium tmux)

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

stop_system_rabbitmq() {
    # Stop and disable the packaged service so it does not occupy 5672 / 25672 / 4369.
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        $SUDO systemctl disable --now rabbitmq-server.service >/dev/null 2>&1 || true
        $SUDO systemctl disable --now epmd.socket epmd.service >/dev/null 2>&1 || true
    else
        if [ -x /etc/init.d/rabbitmq-server ]; then
            $SUDO /etc/init.d/rabbitmq-server stop >/dev/null 2>&1 || true
        fi
        if command -v update-rc.d >/dev/null 2>&1 && [ -e /etc/init.d/rabbitmq-server ]; then
            $SUDO update-rc.d rabbitmq-server disable >/dev/null 2>&1 || true
        fi
    fi
    # The package's scripts may leave an epmd daemon listening on 0.0.0.0:4369.
    # Stop it when no Erlang node is registered there (our brokers use their own epmd).
    if command -v epmd >/dev/null 2>&1 && epmd -names >/dev/null 2>&1; then
        if ! epmd -names 2>/dev/null | grep -q '^name '; then
            epmd -kill >/dev/null 2>&1 || true
        fi
    fi
}

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

echo "install-system-deps: installing ${missing[*]}" >&2

# Forbid service start-up during the installation (the same mechanism Docker images
# use): with it rabbitmq-server's postinst neither starts the system broker nor fails
# when there is no init system. Only added when the machine has no policy of its own.
POLICY=/usr/sbin/policy-rc.d
added_policy=0
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod 755 "$POLICY"
    added_policy=1
fi
cleanup() {
    if [ "$added_policy" -eq 1 ]; then
        $SUDO rm -f "$POLICY"
    fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
# wireshark-common: answer its "allow non-superusers to capture" question with No: the machine
# keeps dumpcap without capabilities; the tests grant them to a test group and take them back.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections

apt_install() {
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "$@" >/tmp/install-system-deps.log 2>&1
}

if ! apt_install "${missing[@]}"; then
    # Stale package lists: refresh once and retry.
    $SUDO apt-get update -q >>/tmp/install-system-deps.log 2>&1 || true
    if ! apt_install "${missing[@]}"; then
        echo "install-system-deps: apt-get install failed, see /tmp/install-system-deps.log" >&2
        tail -n 20 /tmp/install-system-deps.log >&2
        exit 1
    fi
fi

stop_system_rabbitmq
echo "install-system-deps: done" >&2
