package azure

import (
	"time"

	"github.com/pulumi/pulumi-random/sdk/v4/go/random"
	"github.com/pulumi/pulumi-tls/sdk/v5/go/tls"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// ClusterPKI issues every authority and leaf of pki.Profiles with the Pulumi TLS provider. The
// keys and certificates live in Pulumi state, so `pulumi up` reuses them and customData does not
// churn; every private key is a secret output.
type ClusterPKI struct {
	pulumi.ResourceState

	// Bundle holds a pki.Bundle once every key and certificate is known (secret).
	Bundle pulumi.AnyOutput
}

// ClusterPKIArgs configures NewClusterPKI.
type ClusterPKIArgs struct {
	Cluster *spec.Cluster
	// Now places the workers' join tokens in their month (pki.BootstrapTokenWindow): the first
	// run of a month issues new ones.
	Now time.Time
}

// NewClusterPKI issues the cluster's PKI.
func NewClusterPKI(ctx *pulumi.Context, name string, args *ClusterPKIArgs, opts ...pulumi.ResourceOption) (*ClusterPKI, error) {
	comp := &ClusterPKI{}
	if err := ctx.RegisterComponentResource("clusterforge:azure:ClusterPKI", name, comp, opts...); err != nil {
		return nil, err
	}
	c := args.Cluster
	parent := pulumi.Parent(comp)
	var names []string
	var certs, keys []any

	ecdsaKey := &tls.PrivateKeyArgs{Algorithm: pulumi.String("ECDSA"), EcdsaCurve: pulumi.String("P256")}
	newKey := func(n string, args *tls.PrivateKeyArgs) (*tls.PrivateKey, error) {
		return tls.NewPrivateKey(ctx, name+"-"+n+"-key", args, parent)
	}
	type authority struct{ cert, key pulumi.StringOutput }
	cas := map[string]authority{}
	for _, a := range pki.Authorities(c) {
		key, err := newKey(a.Name, ecdsaKey)
		if err != nil {
			return nil, err
		}
		cert, err := tls.NewSelfSignedCert(ctx, name+"-"+a.Name, &tls.SelfSignedCertArgs{
			PrivateKeyPem:       key.PrivateKeyPem,
			IsCaCertificate:     pulumi.Bool(true),
			AllowedUses:         usages(a.Usages),
			ValidityPeriodHours: pulumi.Int(pki.CAValidityHours),
			Subject:             &tls.SelfSignedCertSubjectArgs{CommonName: pulumi.String(a.CommonName)},
		}, parent)
		if err != nil {
			return nil, err
		}
		cas[a.Name] = authority{cert.CertPem, key.PrivateKeyPem}
		names, certs, keys = append(names, a.Name), append(certs, cert.CertPem), append(keys, key.PrivateKeyPem)
	}
	for _, p := range pki.Profiles(c) {
		key, err := newKey(p.Name, ecdsaKey)
		if err != nil {
			return nil, err
		}
		csr, err := tls.NewCertRequest(ctx, name+"-"+p.Name+"-csr", &tls.CertRequestArgs{
			PrivateKeyPem: key.PrivateKeyPem,
			Subject:       &tls.CertRequestSubjectArgs{CommonName: pulumi.String(p.CommonName), Organization: optional(p.Organization)},
			DnsNames:      pulumi.ToStringArray(p.DNSNames),
			IpAddresses:   pulumi.ToStringArray(p.IPAddresses),
		}, parent)
		if err != nil {
			return nil, err
		}
		issuer := cas[p.Issuer]
		hours, earlyRenewal := p.Validity()
		cert, err := tls.NewLocallySignedCert(ctx, name+"-"+p.Name, &tls.LocallySignedCertArgs{
			CertRequestPem:      csr.CertRequestPem,
			CaCertPem:           issuer.cert,
			CaPrivateKeyPem:     issuer.key,
			AllowedUses:         usages(p.Usages),
			ValidityPeriodHours: pulumi.Int(hours),
			EarlyRenewalHours:   pulumi.Int(earlyRenewal),
		}, parent)
		if err != nil {
			return nil, err
		}
		names, certs, keys = append(names, p.Name), append(certs, cert.CertPem), append(keys, key.PrivateKeyPem)
	}
	saKey, err := newKey(pki.ServiceAccountKey, &tls.PrivateKeyArgs{Algorithm: pulumi.String("RSA"), RsaBits: pulumi.Int(pki.ServiceAccountKeyBits)})
	if err != nil {
		return nil, err
	}
	names, certs, keys = append(names, pki.ServiceAccountKey), append(certs, saKey.PublicKeyPem), append(keys, saKey.PrivateKeyPem)

	// The seed of the pools' join tokens (pki.JoinToken), replaced each month. A random string's
	// result is in the clear in the state unless marked secret.
	month, expires := pki.BootstrapTokenWindow(args.Now)
	joinSeed, err := random.NewRandomString(ctx, name+"-join-seed", &random.RandomStringArgs{
		Length: pulumi.Int(pki.JoinSeedLength), Upper: pulumi.Bool(false), Special: pulumi.Bool(false),
		Keepers: pulumi.StringMap{"month": pulumi.String(month)},
	}, parent, pulumi.AdditionalSecretOutputs([]string{"result"}))
	if err != nil {
		return nil, err
	}

	encryptionKey, err := random.NewRandomBytes(ctx, name+"-encryption-key", &random.RandomBytesArgs{
		Length: pulumi.Int(pki.EncryptionKeyBytes),
	}, parent)
	if err != nil {
		return nil, err
	}

	all := append(append(append([]any{}, certs...), keys...), joinSeed.Result, encryptionKey.Base64)
	comp.Bundle = pulumi.ToSecret(pulumi.All(all...).ApplyT(func(v []any) pki.Bundle {
		b := pki.Bundle{Pairs: map[string]pki.KeyPair{}}
		for i, n := range names {
			b.Pairs[n] = pki.KeyPair{CertPEM: v[i].(string), KeyPEM: v[len(names)+i].(string)}
		}
		b.JoinSeed = v[2*len(names)].(string)
		b.BootstrapTokenExpires = expires
		b.EncryptionKey = v[2*len(names)+1].(string)
		return b
	})).(pulumi.AnyOutput)
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{}); err != nil {
		return nil, err
	}
	return comp, nil
}

func usages(us []pki.Usage) pulumi.StringArray {
	out := make(pulumi.StringArray, len(us))
	for i, u := range us {
		out[i] = pulumi.String(u)
	}
	return out
}

func optional(s string) pulumi.StringPtrInput {
	if s == "" {
		return nil
	}
	return pulumi.String(s)
}
