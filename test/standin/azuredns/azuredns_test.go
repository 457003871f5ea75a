package azuredns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
)

// The standard library's resolver, over UDP and TCP, reads the stand-in's answers: a known name's
// address, no IPv6 address, and no such host for any other name.
func TestResolverReadsTheAnswers(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := pc.LocalAddr().String()
	pc.Close()
	rs := Records{}
	if err := rs.Set("Login.MicrosoftOnline.com.=192.0.2.10"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = rs.Serve(ctx, listen) }()
	for _, network := range []string{"udp", "tcp"} {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, listen)
		}}
		var addrs []netip.Addr
		for range 50 { // until the server listens
			if addrs, err = r.LookupNetIP(ctx, "ip", "login.microsoftonline.com"); err == nil {
				break
			}
		}
		if err != nil || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("192.0.2.10") {
			t.Fatalf("%s: login.microsoftonline.com = %v, %v; want 192.0.2.10 alone", network, addrs, err)
		}
		_, err = r.LookupNetIP(ctx, "ip", "example.com")
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("%s: example.com: %v; want no such host", network, err)
		}
	}
}

func TestRecordFlagRefusesWhatIsNoIPv4Record(t *testing.T) {
	for _, v := range []string{"login.microsoftonline.com", "=192.0.2.1", "x=2001:db8::1", "x=host"} {
		if err := (Records{}).Set(v); err == nil {
			t.Errorf("--record=%s accepted", v)
		}
	}
}
