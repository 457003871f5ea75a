#!/usr/bin/env bash
# Brings writes back to an etcd cluster that raised the NOSPACE alarm (L04): compact the history
# to the current revision, defragment every member, disarm the alarm.
# Runbook: docs/runbooks/etcd.md. The rehearsal checks run this script against a real etcd.
#
# Usage (etcdctl reads the ETCDCTL_* variables):
#   ETCDCTL_ENDPOINTS=https://10.0.1.10:2379,... ETCDCTL_CACERT=etcd-servers-ca.crt \
#   ETCDCTL_CERT=apiserver-etcd-client.crt ETCDCTL_KEY=apiserver-etcd-client.key \
#   scripts/etcd-nospace-recover.sh
set -euo pipefail
: "${ETCDCTL_ENDPOINTS:?set ETCDCTL_ENDPOINTS to the client URLs of every member}"
ETCDCTL=${ETCDCTL:-etcdctl}
export ETCDCTL_ENDPOINTS ETCDCTL_CACERT ETCDCTL_CERT ETCDCTL_KEY

echo "==> alarms before"
$ETCDCTL alarm list
rev=$($ETCDCTL endpoint status --write-out=json | grep -o '"revision":[0-9]*' | cut -d: -f2 | sort -n | tail -1)
[ -n "$rev" ] || { echo "could not read the current revision" >&2; exit 1; }
echo "==> compacting history up to revision $rev"
if ! out=$($ETCDCTL compact "$rev" --physical 2>&1); then
  # The apiserver compacts every few minutes too; losing that race is fine.
  grep -q "has been compacted" <<<"$out" || { echo "$out" >&2; exit 1; }
fi
echo "$out"
echo "==> defragmenting every member (one at a time; each pauses its member briefly)"
$ETCDCTL defrag --cluster
echo "==> disarming the alarm"
$ETCDCTL alarm disarm
echo "==> alarms after (none expected)"
$ETCDCTL alarm list
$ETCDCTL endpoint status --write-out=table
