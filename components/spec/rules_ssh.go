package spec

import (
	"crypto/rsa"
	"strings"

	"golang.org/x/crypto/ssh"
)

// minRSABits is the smallest RSA key Azure accepts for a Linux login.
const minRSABits = 2048

// validateSSHKey parses admin.sshPublicKey as sshd reads an authorized_keys line. Azure takes
// ssh-rsa (2048 bits or more) and ssh-ed25519. A private key is refused without echoing any of it.
func (c *Cluster) validateSSHKey(v *validator) {
	const field = "admin.sshPublicKey"
	key := c.Admin.SSHPublicKey
	if key == "" {
		return // `pulumi up` generates one and exports its private half as a secret
	}
	if strings.Contains(key, "PRIVATE KEY") || isPrivateKey(key) {
		v.fail(field, "give the public half (the .pub file), and treat the private key as leaked: it is in the stack file and its history",
			"is a private key")
		return
	}
	pub, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(key))
	switch {
	case err != nil:
		v.fail(field, "paste one line of an OpenSSH public key file, e.g. the contents of ~/.ssh/id_ed25519.pub", "is not an OpenSSH public key")
	case len(options) > 0:
		v.fail(field, "remove the authorized_keys options before the key type", "carries options %s", Excerpt(strings.Join(options, ",")))
	case len(strings.TrimSpace(string(rest))) > 0:
		v.fail(field, "give exactly one key", "holds more than one line")
	case pub.Type() == ssh.KeyAlgoED25519:
	case pub.Type() == ssh.KeyAlgoRSA:
		if bits := pub.(ssh.CryptoPublicKey).CryptoPublicKey().(*rsa.PublicKey).N.BitLen(); bits < minRSABits {
			v.fail(field, "use an ed25519 key or an RSA key of at least 2048 bits", "is a %d-bit RSA key", bits)
		}
	default:
		v.fail(field, "use an ssh-ed25519 or ssh-rsa key: Azure accepts no other type", "is a %s key", pub.Type())
	}
}

func isPrivateKey(s string) bool {
	_, err := ssh.ParseRawPrivateKey([]byte(s))
	_, missing := err.(*ssh.PassphraseMissingError)
	return err == nil || missing
}

// AuthorizedKey is admin.sshPublicKey as one canonical authorized_keys line (type and key, no
// comment): what the machines receive.
func (a Admin) AuthorizedKey() string {
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(a.SSHPublicKey))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}
