#!/usr/bin/env bash
# Installs, pinned, what `make plan` and `make test` need on a fresh Debian 12 machine:
# the validators the tests run (cloud-init's schema checker, systemd-analyze), `ps` for kube-bench,
# debootstrap for local image bakes, libseccomp for the node image's runc, systemd-nspawn
# (systemd-container, the version of this machine's systemd) for `make boot`, Node and npm for
# Azurite, jq for the Kubernetes provider's build, and the Go modules. The rehearsal's binaries come from scripts/toolchain.sh (`make tools`).
# Idempotent; safe to run on every `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

CLOUD_INIT_VERSION="22.4.2-1+deb12u4"   # Debian 12's cloud-init
LIBSECCOMP_VERSION="2.5.4-1+deb12u1"    # linked into the node image's runc (scripts/toolchain.sh)
# The newest go directive of our modules and the toolchain's wrappers: the Go they all build with.
GO_MIN=$(awk '$1 == "go" {print $2}' go.mod images/go.mod scripts/toolchain/*/go.mod | sort -V | tail -1)

step() { printf '==> %s\n' "$*"; }

have_pkg() { [ "$(dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true)" = "$2" ]; }

if ! have_pkg cloud-init "$CLOUD_INIT_VERSION" || ! have_pkg libseccomp-dev "$LIBSECCOMP_VERSION" \
  || ! command -v systemd-analyze >/dev/null || ! command -v ps >/dev/null \
  || ! command -v debootstrap >/dev/null || ! command -v unshare >/dev/null || ! command -v jq >/dev/null; then
  step "installing cloud-init $CLOUD_INIT_VERSION, libseccomp-dev $LIBSECCOMP_VERSION, systemd, procps, debootstrap, jq (apt)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "cloud-init=$CLOUD_INIT_VERSION" "libseccomp-dev=$LIBSECCOMP_VERSION" systemd procps debootstrap util-linux jq >/dev/null
else
  step "cloud-init $CLOUD_INIT_VERSION, libseccomp-dev $LIBSECCOMP_VERSION, systemd-analyze, ps, debootstrap and jq present"
fi

SYSTEMD_VERSION="$(dpkg-query -W -f='${Version}' systemd)"
if ! have_pkg systemd-container "$SYSTEMD_VERSION"; then
  step "installing systemd-container $SYSTEMD_VERSION (apt): systemd-nspawn boots the machines of make boot"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "systemd-container=$SYSTEMD_VERSION" >/dev/null
else
  step "systemd-container $SYSTEMD_VERSION present (systemd-nspawn)"
fi

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  step "installing nodejs and npm (apt): Azurite, the rehearsal's blob store, runs on Node"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
else
  step "node $(node --version) and npm present (Azurite)"
fi

step "checking Go >= $GO_MIN"
have=$(go env GOVERSION); have=${have#go}
[ "$(printf '%s\n%s\n' "$GO_MIN" "$have" | sort -V | head -1)" = "$GO_MIN" ] || {
  echo "setup: Go $have is older than $GO_MIN, which the toolchain's modules need: install Go $GO_MIN or newer" >&2; exit 1; }
go version
step "downloading Go modules (pinned by go.sum)"
export GONOSUMDB="${GONOSUMDB:-github.com/pulumi/pulumi-azure-native-sdk/managedidentity/v2}"
go mod download
step "set-up done"
