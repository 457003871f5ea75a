package pki

import (
	"crypto/hmac"
	"crypto/sha256"
	"math/big"
	"strings"
)

// JoinSeedLength is the length of a Bundle's JoinSeed, of [a-z0-9]: 165 bits.
const JoinSeedLength = 32

// NewJoinSeed is a random JoinSeed.
func NewJoinSeed() string { return randomToken(JoinSeedLength) }

// Lengths of a bootstrap token's "<id>.<secret>" parts, as the apiserver's authenticator reads them.
const (
	joinTokenIDLength     = 6
	joinTokenSecretLength = 16
)

// JoinToken is pool's join token, "<id>.<secret>" of [a-z0-9], derived from seed (a Bundle's
// JoinSeed) by HMAC-SHA256: a pool's machines carry their own token, from which neither the seed
// nor another pool's token follows. It is "" without a seed.
func JoinToken(seed, pool string) string {
	if seed == "" {
		return ""
	}
	part := func(kind string, n int) string {
		mac := hmac.New(sha256.New, []byte(seed))
		mac.Write([]byte("clusterforge join token " + kind + "\x00" + pool))
		// 256 bits are 50 base-36 digits; the last n are uniform enough (the first is not).
		digits := new(big.Int).SetBytes(mac.Sum(nil)).Text(36)
		digits = strings.Repeat("0", 50-len(digits)) + digits
		return digits[len(digits)-n:]
	}
	return part("id", joinTokenIDLength) + "." + part("secret", joinTokenSecretLength)
}
