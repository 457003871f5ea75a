package machine

// The local-disk units find Azure's instance-local disk by the names azure-vm-utils gives it
// (L28): the SCSI resource disk as /dev/disk/azure/resource and local NVMe disks as
// /dev/disk/azure/local/by-index/<n>. Debian 12 does not package azure-vm-utils, so the image
// carries these rules itself. azure-vm-utils takes a local disk's index from Azure's vendor data
// (azure-nvme-id, not packaged either); ours is the disk's place among the local NVMe disks in PCI
// order, unverified against it on multi-disk sizes. The local-disk script uses index 1 only.
const (
	AzureDiskRulesPath = "/etc/udev/rules.d/80-clusterforge-azure-disk.rules"
	// AzureLocalDiskIndex prints the index of an NVMe namespace (its argument, e.g. nvme1n1)
	// among the local disks; SYSFS overrides /sys for tests.
	AzureLocalDiskIndex = LibexecDir + "/azure-local-disk-index"
)

const azureDiskRules = `# Stable names for Azure's instance-local disks, as azure-vm-utils names them (L28).
ACTION!="add|change", GOTO="clusterforge_azure_disk_end"
SUBSYSTEM!="block", GOTO="clusterforge_azure_disk_end"
ENV{DEVTYPE}!="disk", GOTO="clusterforge_azure_disk_end"
KERNEL=="nvme*", ATTRS{model}=="Microsoft NVMe Direct Disk*", PROGRAM="` + AzureLocalDiskIndex + ` %k", SYMLINK+="disk/azure/local/by-index/%c"
ENV{ID_VENDOR}=="Msft", ENV{ID_MODEL}=="Virtual_Disk", ATTRS{device_id}=="?00000000-0001-*", SYMLINK+="disk/azure/resource"
LABEL="clusterforge_azure_disk_end"
`

const azureLocalDiskIndexScript = `#!/bin/sh
# Prints the 1-based index of NVMe namespace $1 among Azure's local NVMe disks, in PCI order.
set -eu
sys=${SYSFS:-/sys}
n=0
for path in $(for dev in "$sys"/class/block/nvme*; do [ -e "$dev/partition" ] || readlink -f "$dev"; done | sort); do
  case "$(cat "$path/device/model" 2>/dev/null)" in
    "Microsoft NVMe Direct Disk"*) n=$((n + 1)) ;;
    *) continue ;;
  esac
  if [ "${path##*/}" = "$1" ]; then echo "$n"; exit 0; fi
done
echo "$1 is not an Azure local NVMe disk" >&2
exit 1
`

var azureDiskNames = part{files: []File{
	{Path: AzureDiskRulesPath, Content: azureDiskRules, Mode: 0o644},
	{Path: AzureLocalDiskIndex, Content: azureLocalDiskIndexScript, Mode: 0o755},
}}
