package pki

import (
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
)

// Where the service-account issuer's documents live under its URL, as kube-apiserver serves them
// and as Entra ID reads them (OpenID Connect discovery).
const (
	IssuerDiscoveryPath = ".well-known/openid-configuration"
	IssuerKeysPath      = "openid/v1/jwks"
)

// IssuerKeysURL is the key set's URL under the issuer's.
func IssuerKeysURL(issuer string) string {
	return strings.TrimSuffix(issuer, "/") + "/" + IssuerKeysPath
}

// IssuerDocuments are the issuer's discovery document and key set for the service-account public
// key (PEM), in the shape kube-apiserver serves them: Pulumi publishes them where Entra ID reads
// them, since Entra cannot reach a private apiserver.
func IssuerDocuments(issuer, publicKeyPEM string) (discovery, keys []byte, err error) {
	block, _ := pem.Decode([]byte(publicKeyPEM))
	if block == nil {
		return nil, nil, errors.New("pki: the service-account public key is not PEM")
	}
	parsed, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, nil, err
	}
	pub, ok := parsed.(*rsa.PublicKey)
	if !ok {
		return nil, nil, errors.New("pki: the service-account key is not RSA, and Entra ID takes only RSA-signed tokens")
	}
	if keys, err = KeySet(pub); err != nil {
		return nil, nil, err
	}
	discovery, err = json.Marshal(map[string]any{
		"issuer": issuer, "jwks_uri": IssuerKeysURL(issuer),
		"response_types_supported": []string{"id_token"}, "subject_types_supported": []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
	})
	return discovery, keys, err
}

// KeyID names an RSA public key as kube-apiserver does: the SHA-256 of its PKIX DER, base64url.
func KeyID(pub *rsa.PublicKey) string {
	der, _ := x509.MarshalPKIXPublicKey(pub) // an RSA key always marshals
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// KeySet is the JSON Web Key Set of RSA signing keys, each named by KeyID.
func KeySet(keys ...*rsa.PublicKey) ([]byte, error) {
	b64 := base64.RawURLEncoding.EncodeToString
	set := []map[string]string{}
	for _, k := range keys {
		set = append(set, map[string]string{"use": "sig", "kty": "RSA", "kid": KeyID(k), "alg": "RS256",
			"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())})
	}
	return json.Marshal(map[string]any{"keys": set})
}
