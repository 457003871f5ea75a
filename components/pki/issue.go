package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Issue creates a throwaway Bundle from the given authorities and profiles with crypto/x509:
// the same subjects, SANs and usages the Pulumi TLS provider issues on Azure. The join
// tokens' seed is random too.
func Issue(authorities []Authority, profiles []Profile) (Bundle, error) {
	b := Bundle{Pairs: map[string]KeyPair{}}
	cas := map[string]signer{}
	for _, a := range authorities {
		key, keyPEM, err := newKey()
		if err != nil {
			return Bundle{}, err
		}
		tmpl := template(a.CommonName, "", nil, nil, a.Usages, CAValidityHours)
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			return Bundle{}, fmt.Errorf("pki: issue %s: %w", a.Name, err)
		}
		cert, _ := x509.ParseCertificate(der)
		cas[a.Name] = signer{cert, key}
		b.Pairs[a.Name] = KeyPair{CertPEM: encode("CERTIFICATE", der), KeyPEM: keyPEM}
	}
	if err := issueLeaves(b, cas, profiles); err != nil {
		return Bundle{}, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, ServiceAccountKeyBits)
	if err != nil {
		return Bundle{}, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return Bundle{}, err
	}
	keyPEM := encode("PRIVATE KEY", der)
	pub, _ := x509.MarshalPKIXPublicKey(saKey.Public())
	b.Pairs[ServiceAccountKey] = KeyPair{CertPEM: encode("PUBLIC KEY", pub), KeyPEM: keyPEM}
	b.JoinSeed = NewJoinSeed()
	_, b.BootstrapTokenExpires = BootstrapTokenWindow(time.Now())
	secret := make([]byte, EncryptionKeyBytes)
	if _, err := rand.Read(secret); err != nil {
		return Bundle{}, err
	}
	b.EncryptionKey = base64.StdEncoding.EncodeToString(secret)
	return b, nil
}

func newKey() (*ecdsa.PrivateKey, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, "", err
	}
	return key, encode("PRIVATE KEY", der), nil
}

func template(cn, org string, dns, ips []string, usages []Usage, hours int) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	now := time.Now()
	t := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     dns,
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(time.Duration(hours) * time.Hour),
	}
	if org != "" {
		t.Subject.Organization = []string{org}
	}
	for _, ip := range ips {
		t.IPAddresses = append(t.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range usages {
		switch u {
		case DigitalSignature:
			t.KeyUsage |= x509.KeyUsageDigitalSignature
		case KeyEncipherment:
			t.KeyUsage |= x509.KeyUsageKeyEncipherment
		case CertSigning:
			t.KeyUsage |= x509.KeyUsageCertSign
		case ServerAuth:
			t.ExtKeyUsage = append(t.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		case ClientAuth:
			t.ExtKeyUsage = append(t.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
	}
	return t
}

func encode(kind string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}))
}

// randomToken is n characters of [a-z0-9], the alphabet of bootstrap tokens and their seed.
func randomToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	out := make([]byte, n)
	for i := range out {
		v, _ := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		out[i] = alphabet[v.Int64()]
	}
	return string(out)
}

// signer is an authority that issues leaves.
type signer struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// issueLeaves issues every profile's certificate and a new key into b.
func issueLeaves(b Bundle, cas map[string]signer, profiles []Profile) error {
	for _, p := range profiles {
		issuer, ok := cas[p.Issuer]
		if !ok {
			return fmt.Errorf("pki: profile %s names unknown issuer %s", p.Name, p.Issuer)
		}
		key, keyPEM, err := newKey()
		if err != nil {
			return err
		}
		hours, _ := p.Validity()
		tmpl := template(p.CommonName, p.Organization, p.DNSNames, p.IPAddresses, p.Usages, hours)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer.cert, key.Public(), issuer.key)
		if err != nil {
			return fmt.Errorf("pki: issue %s: %w", p.Name, err)
		}
		b.Pairs[p.Name] = KeyPair{CertPEM: encode("CERTIFICATE", der), KeyPEM: keyPEM}
	}
	return nil
}

// Renew re-issues every leaf of b from b's own authorities, as the Pulumi TLS provider does when a
// certificate enters its early-renewal window: the authorities, the service-account key, the join
// token and the encryption key stay, so machines not yet rolled keep working beside renewed ones.
func Renew(b Bundle, authorities []Authority, profiles []Profile) (Bundle, error) {
	out := Bundle{Pairs: maps.Clone(b.Pairs), JoinSeed: b.JoinSeed, BootstrapTokenExpires: b.BootstrapTokenExpires, EncryptionKey: b.EncryptionKey}
	cas := map[string]signer{}
	for _, a := range authorities {
		kp := b.Pair(a.Name)
		certBlock, _ := pem.Decode([]byte(kp.CertPEM))
		keyBlock, _ := pem.Decode([]byte(kp.KeyPEM))
		if certBlock == nil || keyBlock == nil {
			return Bundle{}, fmt.Errorf("pki: renew: authority %s has no certificate and key", a.Name)
		}
		cert, err := x509.ParseCertificate(certBlock.Bytes)
		if err != nil {
			return Bundle{}, fmt.Errorf("pki: renew: %s: %w", a.Name, err)
		}
		key, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
		if err != nil {
			return Bundle{}, fmt.Errorf("pki: renew: %s key: %w", a.Name, err)
		}
		k, ok := key.(crypto.Signer)
		if !ok {
			return Bundle{}, fmt.Errorf("pki: renew: %s key cannot sign", a.Name)
		}
		cas[a.Name] = signer{cert, k}
	}
	if err := issueLeaves(out, cas, profiles); err != nil {
		return Bundle{}, err
	}
	return out, nil
}

// NotAfter is when a certificate of the bundle expires.
func (b Bundle) NotAfter(name string) (time.Time, error) {
	block, _ := pem.Decode([]byte(b.Pair(name).CertPEM))
	if block == nil {
		return time.Time{}, fmt.Errorf("pki: %s has no certificate", name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, err
	}
	return cert.NotAfter, nil
}

// stored is a Bundle on disk with what it was issued for.
type stored struct {
	// Issued is a digest of the authorities and profiles the bundle was issued from.
	Issued string `json:"issued"`
	Bundle Bundle `json:"bundle"`
}

// Load reads a bundle Kept saved at path.
func Load(path string) (Bundle, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Bundle{}, err
	}
	var s stored
	if err := json.Unmarshal(data, &s); err != nil {
		return Bundle{}, fmt.Errorf("%s: %w", path, err)
	}
	return s.Bundle, nil
}

// Kept returns the bundle kept at path when it was issued from the same authorities and profiles
// and its bootstrap token is still valid, as Pulumi state keeps a PKI across runs; otherwise a
// new one. save keeps the returned bundle at path (mode 0600, written atomically): call it once
// what uses the bundle has succeeded, so a refused run leaves nothing behind.
func Kept(path string, authorities []Authority, profiles []Profile) (b Bundle, save func() error, err error) {
	digest, err := json.Marshal(struct {
		A []Authority
		P []Profile
	}{authorities, profiles})
	if err != nil {
		return Bundle{}, nil, err
	}
	issued := fmt.Sprintf("%x", sha256.Sum256(digest))
	save = func() error {
		data, err := json.Marshal(stored{Issued: issued, Bundle: b})
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if data, err := os.ReadFile(path); err == nil {
		var s stored
		if json.Unmarshal(data, &s) == nil && s.Issued == issued && s.Bundle.JoinSeed != "" && time.Now().Before(s.Bundle.BootstrapTokenExpires) {
			return s.Bundle, save, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return Bundle{}, nil, err
	}
	b, err = Issue(authorities, profiles)
	return b, save, err
}
