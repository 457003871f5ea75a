package pki

import (
	"crypto/x509"
	"encoding/pem"
	"regexp"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

func parse(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProfilesVerify issues every profile and checks each leaf against its CA for the names and
// usages clients will use.
func TestProfilesVerify(t *testing.T) {
	c := &spec.Cluster{Name: "cf-test", Pools: []spec.Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 3}}}
	c.Default()
	b, err := Issue(Authorities(c), Profiles(c))
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]*x509.CertPool{}
	for _, a := range Authorities(c) {
		roots[a.Name] = x509.NewCertPool()
		roots[a.Name].AddCert(parse(t, b.Pair(a.Name).CertPEM))
	}
	main := c.EtcdClusters()[0]
	for _, tc := range []struct {
		name, ca, host string
		usage          x509.ExtKeyUsage
	}{
		{EtcdServer(spec.RoleEtcdMain), EtcdCA(spec.RoleEtcdMain), main.Members[4].IP, x509.ExtKeyUsageServerAuth},
		{EtcdPeer(spec.RoleEtcdMain), EtcdCA(spec.RoleEtcdMain), main.Members[0].IP, x509.ExtKeyUsageClientAuth},
		{EtcdServer(spec.RoleEtcdEvents), EtcdCA(spec.RoleEtcdEvents), c.EtcdClusters()[1].Members[2].IP, x509.ExtKeyUsageServerAuth},
		{APIServer, ClusterCA, c.Network.APIServerIP, x509.ExtKeyUsageServerAuth},
		{APIServer, ClusterCA, "kubernetes.default.svc", x509.ExtKeyUsageServerAuth},
		{APIServer, ClusterCA, c.KubernetesServiceIP(), x509.ExtKeyUsageServerAuth},
		{APIServerEtcdClient, EtcdClientCA, "", x509.ExtKeyUsageClientAuth},
		{FrontProxyClient, FrontProxyCA, "", x509.ExtKeyUsageClientAuth},
		{Admin, ClusterCA, "", x509.ExtKeyUsageClientAuth},
	} {
		cert := parse(t, b.Pair(tc.name).CertPEM)
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: tc.host, Roots: roots[tc.ca], KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("%s for %q: %v", tc.name, tc.host, err)
		}
	}
	if got := parse(t, b.Pair(Admin).CertPEM).Subject.Organization; len(got) != 1 || got[0] != "system:masters" {
		t.Errorf("admin organization %v", got)
	}
	if len(b.JoinSeed) != JoinSeedLength {
		t.Errorf("join seed %q is not %d characters", b.JoinSeed, JoinSeedLength)
	}
}

// Each pool's join token has the bootstrap-token grammar, is its own (no pool shares an id or a
// secret with another) and stays the same for one seed.
func TestJoinTokensArePerPool(t *testing.T) {
	grammar := regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	seed, other := randomToken(JoinSeedLength), randomToken(JoinSeedLength)
	ids, secrets := map[string]string{}, map[string]string{}
	for _, pool := range []string{"system", "cpu", "cpu2", "gpu", "gpua", "gpub"} {
		token := JoinToken(seed, pool)
		if !grammar.MatchString(token) {
			t.Fatalf("pool %s's token %q is not <6>.<16> of [a-z0-9]", pool, token)
		}
		id, secret, _ := strings.Cut(token, ".")
		if p, dup := ids[id]; dup {
			t.Errorf("pools %s and %s share the token id %s", p, pool, id)
		}
		if p, dup := secrets[secret]; dup {
			t.Errorf("pools %s and %s share a token secret", p, pool)
		}
		ids[id], secrets[secret] = pool, pool
		if again := JoinToken(seed, pool); again != token {
			t.Errorf("pool %s's token changed from %q to %q with one seed", pool, token, again)
		}
		if theirs := JoinToken(other, pool); theirs == token {
			t.Errorf("two seeds give pool %s one token", pool)
		}
	}
	if token := JoinToken("", "cpu"); token != "" {
		t.Errorf("no seed gives the token %q", token)
	}
}

// Each etcd cluster trusts its own members as peers and no one else's; as clients, its own members
// and the apiserver. The trust bundles are the ones the machines get.
func TestEtcdClustersDoNotTrustEachOther(t *testing.T) {
	c := &spec.Cluster{Name: "cf-test", Pools: []spec.Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 3}}}
	c.Default()
	b, err := Issue(Authorities(c), Profiles(c))
	if err != nil {
		t.Fatal(err)
	}
	pool := func(pem string) *x509.CertPool {
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM([]byte(pem)) {
			t.Fatal("unreadable trust bundle")
		}
		return p
	}
	verifies := func(cert string, roots *x509.CertPool) bool {
		_, err := parse(t, b.Pair(cert).CertPEM).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	}
	for _, role := range []string{spec.RoleEtcdMain, spec.RoleEtcdEvents} {
		other := spec.RoleEtcdEvents
		if role == other {
			other = spec.RoleEtcdMain
		}
		peers, clients := pool(b.Trust(EtcdCA(role))), pool(b.Trust(EtcdClientCAs(role)...))
		for _, tc := range []struct {
			cert  string
			roots *x509.CertPool
			what  string
			want  bool
		}{
			{EtcdPeer(role), peers, "its own peer as a peer", true},
			{EtcdPeer(other), peers, other + "'s peer as a peer", false},
			{EtcdServer(other), peers, other + "'s server as a peer", false},
			{APIServerEtcdClient, peers, "the apiserver as a peer", false},
			{APIServerEtcdClient, clients, "the apiserver as a client", true},
			{EtcdServer(role), clients, "its own member as a client", true},
			{EtcdPeer(other), clients, other + "'s peer as a client", false},
		} {
			if got := verifies(tc.cert, tc.roots); got != tc.want {
				t.Errorf("%s trusts %s: %v, want %v", role, tc.what, got, tc.want)
			}
		}
	}
	servers := pool(b.Trust(EtcdServerCAs(c)...))
	for _, e := range c.EtcdClusters() {
		if _, err := parse(t, b.Pair(EtcdServer(e.Role)).CertPEM).Verify(x509.VerifyOptions{Roots: servers, DNSName: e.Members[0].IP}); err != nil {
			t.Errorf("the apiserver does not trust %s's server: %v", e.Role, err)
		}
	}
}

// TestRenewKeepsTheAuthorities: renewed leaves are new certificates and keys that verify
// against the same authorities, which stay, so renewed and old machines trust each other.
func TestRenewKeepsTheAuthorities(t *testing.T) {
	c := &spec.Cluster{Name: "cf-test", Pools: []spec.Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 3}}}
	c.Default()
	b, err := Issue(Authorities(c), Profiles(c))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Renew(b, Authorities(c), Profiles(c))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range Authorities(c) {
		if r.Pair(a.Name) != b.Pair(a.Name) {
			t.Errorf("authority %s changed on renewal", a.Name)
		}
	}
	if r.Pair(ServiceAccountKey) != b.Pair(ServiceAccountKey) || r.JoinSeed != b.JoinSeed || r.EncryptionKey != b.EncryptionKey {
		t.Error("renewal changed the service-account key, the join seed or the encryption key")
	}
	for _, p := range Profiles(c) {
		old, renewed := parse(t, b.Pair(p.Name).CertPEM), parse(t, r.Pair(p.Name).CertPEM)
		if renewed.SerialNumber.Cmp(old.SerialNumber) == 0 || r.Pair(p.Name).KeyPEM == b.Pair(p.Name).KeyPEM {
			t.Errorf("%s was not re-issued", p.Name)
		}
		pool := x509.NewCertPool()
		pool.AddCert(parse(t, b.Pair(p.Issuer).CertPEM))
		if _, err := renewed.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("renewed %s does not verify against the original %s: %v", p.Name, p.Issuer, err)
		}
	}
}
