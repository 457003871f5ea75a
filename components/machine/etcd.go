package machine

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// etcd-side files and units.
const (
	etcdPKIDir   = "etcd"
	etcdEnvFile  = RunDir + "/etcd.env"
	etcdJoinUnit = "etcd-join.service"
	EtcdUnit     = "etcd.service"
	// EtcdDiskUnit mounts the local SSD at the data dir; etcd-join requires it, so a failed mount
	// stops etcd from starting on the OS disk.
	EtcdDiskUnit   = "etcd-disk.service"
	etcdDiskLabel  = "etcd-data"
	etcdctlTimeout = "5s"
)

// tlsCipherSuites are the strong TLS 1.2 suites every control-plane listener accepts (CIS 1.2.x, 2.x).
var tlsCipherSuites = strings.Join([]string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
}, ",")

// EtcdFlags are one etcd member's flags. Per-member values come from NodeEnvFile and etcdEnvFile.
func EtcdFlags(e spec.EtcdCluster) Flags {
	server, peer := pki.EtcdServer(e.Role), pki.EtcdPeer(e.Role)
	return Flags{
		"name":                        "${NODE_NAME}",
		"data-dir":                    EtcdDataDir, // on the local SSD (L02), mounted by etcd-disk.service
		"listen-client-urls":          fmt.Sprintf("https://${NODE_IP}:%d", wellknown.EtcdClientPort),
		"advertise-client-urls":       fmt.Sprintf("https://${NODE_IP}:%d", wellknown.EtcdClientPort),
		"listen-peer-urls":            fmt.Sprintf("https://${NODE_IP}:%d", wellknown.EtcdPeerPort),
		"initial-advertise-peer-urls": fmt.Sprintf("https://${NODE_IP}:%d", wellknown.EtcdPeerPort),
		"listen-metrics-urls":         fmt.Sprintf("http://${NODE_IP}:%d", wellknown.EtcdMetricsPort),
		"initial-cluster":             e.InitialCluster(),
		"initial-cluster-token":       e.Role,
		"initial-cluster-state":       "${INITIAL_CLUSTER_STATE}",
		"client-cert-auth":            "true",
		"trusted-ca-file":             CertPath(etcdPKIDir, pki.EtcdClientsCA),
		"cert-file":                   CertPath(etcdPKIDir, server),
		"key-file":                    KeyPath(etcdPKIDir, server),
		"peer-client-cert-auth":       "true",
		"peer-trusted-ca-file":        CertPath(etcdPKIDir, pki.EtcdCA(e.Role)),
		"peer-cert-file":              CertPath(etcdPKIDir, peer),
		"peer-key-file":               KeyPath(etcdPKIDir, peer),
		"quota-backend-bytes":         strconv.FormatInt(e.Spec.QuotaBackendBytes, 10), // L04
		"cipher-suites":               tlsCipherSuites,
	}
}

func etcd(c *spec.Cluster, e spec.EtcdCluster, b pki.Bundle) part {
	files := []File{
		{Path: CertPath(etcdPKIDir, pki.EtcdCA(e.Role)), Content: b.Pair(pki.EtcdCA(e.Role)).CertPEM, Mode: certMode},
		{Path: CertPath(etcdPKIDir, pki.EtcdClientsCA), Content: b.Trust(pki.EtcdClientCAs(e.Role)...), Mode: certMode},
	}
	files = append(files, pairFiles(etcdPKIDir, pki.EtcdServer(e.Role), b.Pair(pki.EtcdServer(e.Role)))...)
	files = append(files, pairFiles(etcdPKIDir, pki.EtcdPeer(e.Role), b.Pair(pki.EtcdPeer(e.Role)))...)
	// After the image check, through the identity step, as every unit of the user-data.
	disk := localDisk(strings.TrimSuffix(EtcdDiskUnit, ".service"), etcdDiskLabel, EtcdDataDir, "format and mount the local SSD as etcd's data dir (L02)",
		"Requires="+identityUnit+"\nAfter="+identityUnit+"\nBefore="+etcdJoinUnit)
	files = append(files, disk.files...)
	files = append(files, File{Path: LibexecDir + "/etcd-join", Content: etcdJoinScript(e), Mode: 0o755})
	var units []Unit
	if e.Role == spec.RoleEtcdMain {
		backup := etcdBackup(c, e)
		files, units = append(files, backup.files...), backup.units
	}
	return part{
		files: files,
		units: append(units,
			disk.units[0],
			Unit{Name: etcdJoinUnit, Enable: true, Content: `[Unit]
Description=clusterforge: join etcd as a new or a returning member (L02)
After=` + identityUnit + " " + EtcdDiskUnit + `
Requires=` + identityUnit + " " + EtcdDiskUnit + `

[Service]
Type=oneshot
RemainAfterExit=yes
EnvironmentFile=` + NodeEnvFile + `
ExecStart=` + ExecArg(LibexecDir+"/etcd-join") + `
# systemd drops etcd's start job when an attempt fails; a retry that succeeds starts it again.
ExecStartPost=/usr/bin/systemctl start --no-block ` + EtcdUnit + `
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
`},
			service{
				name: strings.TrimSuffix(EtcdUnit, ".service"), description: "etcd " + e.Role + " member",
				after: []string{etcdJoinUnit}, requires: []string{etcdJoinUnit},
				binary: BinDir + "/etcd", flags: EtcdFlags(e),
				envFiles: []string{NodeEnvFile, etcdEnvFile}, limitNoFile: true,
				// A member removed from its cluster exits 0 and must stay down.
				onFailureOnly: true,
			}.unit(),
		),
	}
}

// localDisk is the boot unit and script that mount the local disk at dir; ordering holds the
// unit's dependency lines (Before= the unit that needs the disk).
func localDisk(name, label, dir, description, ordering string) part {
	script := LibexecDir + "/" + name
	return part{
		files: []File{{Path: script, Content: localDiskScript(label, dir), Mode: 0o755}},
		units: []Unit{bootStep(name+".service", description, ordering, script)},
	}
}

// localDiskScript mounts the instance-local temp/NVMe disk (L02, L22) at dir. Azure wipes it on
// deallocate or redeploy; a fresh disk is formatted and seeded with what the OS disk holds at dir
// (the images baked into containerd's root; nothing for etcd, which etcd-join.service rejoins).
// label and dir are clusterforge's constants, never a stack's text.
func localDiskScript(label, dir string) string {
	return `#!/bin/sh
set -eu
label=` + label + `
dir=` + dir + `
mountpoint -q "$dir" && exit 0
dev=
for candidate in /dev/disk/azure/local/by-index/1 /dev/disk/azure/resource; do
  if [ -e "$candidate" ]; then dev=$(readlink -f "$candidate"); break; fi
done
[ -n "$dev" ] || { echo "no local temp/NVMe disk under /dev/disk/azure" >&2; exit 1; }
mkdir -p "$dir"
if [ "$(blkid -s LABEL -o value "$dev" 2>/dev/null || true)" != "$label" ]; then
  for part in "$dev"*; do umount "$part" 2>/dev/null || true; done
  mkfs.ext4 -F -L "$label" -E lazy_itable_init=1 "$dev"
  seed=$(mktemp -d)
  mount -o noatime "$dev" "$seed"
  cp -a "$dir"/. "$seed"/
  umount "$seed" && rmdir "$seed"
fi
mount -o noatime "$dev" "$dir"
chmod 700 "$dir"
`
}

// etcdJoinScript decides how this member starts (INITIAL_CLUSTER_STATE: an ETCD_* name would clash
// with the flag, which etcd refuses). With data on disk it starts as configured; with none and no
// peer answering, the events etcd starts as configured (a new cluster) and the main etcd only
// if its backup store proves it never existed (noPeerAnswers). A member whose disk came back empty
// while its peers have quorum is removed and added again: restarting it as a fresh cluster would
// split the cluster (L02). The only stack-derived text is the members' addresses, printed from parsed
// addresses (digits and dots). The etcd machines' user-data is kept byte-for-byte across changes
// that do not need it: Azure refuses an in-place customData change of a VM, so any edit here
// makes the next `pulumi up` fail on every etcd VM (the golden files show it).
func etcdJoinScript(e spec.EtcdCluster) string {
	return `#!/bin/sh
set -eu
mkdir -p "$(dirname ` + etcdEnvFile + `)"
state=new
if [ ! -d ` + EtcdDataDir + `/member ]; then
  peer_url=https://$NODE_IP:` + strconv.Itoa(wellknown.EtcdPeerPort) + `
  endpoints=$(echo "` + strings.Join(e.ClientURLs(), " ") + `" | tr ' ' '\n' | grep -v "//$NODE_IP:" | paste -sd, -)
  ctl() {
    ` + BinDir + `/etcdctl --endpoints="$endpoints" --command-timeout=` + etcdctlTimeout + ` \
      --cacert=` + CertPath(etcdPKIDir, pki.EtcdCA(e.Role)) + ` \
      --cert=` + CertPath(etcdPKIDir, pki.EtcdServer(e.Role)) + ` \
      --key=` + KeyPath(etcdPKIDir, pki.EtcdServer(e.Role)) + ` "$@"
  }
  if members=$(ctl member list -w simple 2>/dev/null); then
    # "<id>, <started|unstarted>, <name>, <peer urls>, <client urls>, <learner>". A member that
    # never ran has published no client URLs: etcdctl calls a member of the initial cluster
    # "started" as soon as it has a name, and the initial cluster names every member.
    mine=$(echo "$members" | awk -F', ' -v u="$peer_url" '$4 == u {print $1, ($5 == "" ? "unstarted" : $2)}')
    case "$mine" in
      *" unstarted") ;; # a member of the initial cluster starting late: start as configured
      "")
        ctl member add "$NODE_NAME" --peer-urls="$peer_url"
        state=existing ;;
      *)
        ctl member remove "${mine%% *}"
        ctl member add "$NODE_NAME" --peer-urls="$peer_url"
        state=existing ;;
    esac` + noPeerAnswers(e) + `
  fi
fi
` + clearStatus(e) + `echo "INITIAL_CLUSTER_STATE=$state" > ` + etcdEnvFile + `
`
}

// noPeerAnswers is the main etcd's branch for a member with an empty data dir whose peers do not
// answer: it starts a new cluster only if the backup store proves this cluster never existed;
// otherwise it fails (retried every RestartSec) and says why in EtcdStatusFile, so etcd never
// serves an empty cluster over lost data. The events etcd, whose data is disposable, has none.
func noPeerAnswers(e spec.EtcdCluster) string {
	if e.Role != spec.RoleEtcdMain {
		return ""
	}
	return `
  else
    ` + EtcdBackupBinary + ` may-bootstrap --config=` + EtcdBackupConfig
}

// clearStatus forgets an earlier refusal once the member starts.
func clearStatus(e spec.EtcdCluster) string {
	if e.Role != spec.RoleEtcdMain {
		return ""
	}
	return "rm -f " + EtcdStatusFile + "\n"
}
