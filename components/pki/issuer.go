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
	// The key id is kube-apiserver's: the SHA-256 of the key's PKIX DER, base64url.
	sum := sha256.Sum256(block.Bytes)
	b64 := base64.RawURLEncoding.EncodeToString
	keys, err = json.Marshal(map[string]any{"keys": []map[string]string{{
		"use": "sig", "kty": "RSA", "kid": b64(sum[:]), "alg": "RS256",
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes()),
	}}})
	if err != nil {
		return nil, nil, err
	}
	discovery, err = json.Marshal(map[string]any{
		"issuer": issuer, "jwks_uri": IssuerKeysURL(issuer),
		"response_types_supported": []string{"id_token"}, "subject_types_supported": []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
	})
	return discovery, keys, err
}
