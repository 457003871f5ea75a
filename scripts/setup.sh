#!/usr/bin/env bash
# Installs, pinned, what `make plan` and `make test` need on a fresh Debian 12 machine:
# the validators the tests run (cloud-init's schema checker, systemd-analyze), `ps` for kube-bench,
# and the Go modules. The rehearsal's binaries come from scripts/toolchain.sh (`make tools`).
# Idempotent; safe to run on every `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

CLOUD_INIT_VERSION="22.4.2-1+deb12u4"   # Debian 12's cloud-init
GO_MIN="1.24"

step() { printf '==> %s\n' "$*"; }

have_pkg() { [ "$(dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true)" = "$2" ]; }

if ! have_pkg cloud-init "$CLOUD_INIT_VERSION" || ! command -v systemd-analyze >/dev/null || ! command -v ps >/dev/null; then
  step "installing cloud-init $CLOUD_INIT_VERSION, systemd and procps (apt)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "cloud-init=$CLOUD_INIT_VERSION" systemd procps >/dev/null
else
  step "cloud-init $CLOUD_INIT_VERSION, systemd-analyze and ps present"
fi

step "checking Go >= $GO_MIN"
go version
step "downloading Go modules (pinned by go.sum)"
export GONOSUMDB="${GONOSUMDB:-github.com/pulumi/pulumi-azure-native-sdk/managedidentity}"
go mod download
step "set-up done"
