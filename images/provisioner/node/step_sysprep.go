package node

import "context"

// sysprep leaves nothing instance-specific behind, so every VMSS instance boots unique: a new
// machine-id and SSH host keys on first boot, cloud-init runs again, no logs or staging files.
func (b *bake) sysprep(ctx context.Context) error {
	return b.run(ctx, "truncate -s 0 /etc/machine-id && rm -f /var/lib/dbus/machine-id /etc/ssh/ssh_host_* && "+
		"if command -v cloud-init >/dev/null; then cloud-init clean --logs; fi && find /var/log -type f -exec truncate -s 0 {} + && rm -rf "+q(b.StagingDir))
}
