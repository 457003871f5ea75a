package standin

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/clusterforge/clusterforge/components/pki"
)

// The ways an RS256 token fails ParseRS256, for the stand-ins to answer each as their service does.
var (
	ErrNotRS256  = errors.New("the token is not signed with RS256")
	ErrSignature = errors.New("the signature does not verify with the key")
)

// SignRS256 signs claims with key, naming the key by pki.KeyID.
func SignRS256(key *rsa.PrivateKey, claims any) (string, error) {
	header, err := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": pki.KeyID(&key.PublicKey)})
	if err != nil {
		return "", err
	}
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	b64 := base64.RawURLEncoding.EncodeToString
	input := b64(header) + "." + b64(body)
	digest := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		return "", err
	}
	return input + "." + b64(sig), nil
}

// ParseRS256 decodes token's claims into claims, then verifies its signature with the key keyOf
// returns for the token's key id; keyOf may read the decoded claims (an issuer's key depends on
// the issuer), and its error is returned as it is.
func ParseRS256(token string, claims any, keyOf func(kid string) (*rsa.PublicKey, error)) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("the token is not a JWS compact serialization")
	}
	var header struct{ Alg, Kid string }
	if err := decodeSegment(parts[0], &header); err != nil {
		return err
	}
	if err := decodeSegment(parts[1], claims); err != nil {
		return err
	}
	if header.Alg != "RS256" {
		return fmt.Errorf("%w: '%s' is not a supported signature algorithm", ErrNotRS256, header.Alg)
	}
	key, err := keyOf(header.Kid)
	if err != nil {
		return err
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return err
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], sig) != nil {
		return fmt.Errorf("%w '%s'", ErrSignature, header.Kid)
	}
	return nil
}

func decodeSegment(seg string, v any) error {
	data, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// KeyFromSet finds the RSA key kid in a JSON Web Key Set.
func KeyFromSet(set []byte, kid string) (*rsa.PublicKey, error) {
	var doc struct {
		Keys []struct{ Kty, Kid, N, E string }
	}
	if err := json.Unmarshal(set, &doc); err != nil {
		return nil, err
	}
	for _, k := range doc.Keys {
		if k.Kid != kid || k.Kty != "RSA" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	}
	return nil, fmt.Errorf("no RSA key %q in the key set", kid)
}
