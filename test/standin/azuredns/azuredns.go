// Package azuredns stands in for Azure DNS, the resolver every VM's DHCP names (168.63.129.16)
// (deviation "Azure DNS"): it answers the public names of Azure's services with the addresses of
// their stand-ins, so the real clients reach them under the names they are configured with, and
// refuses every other name, since nothing leaves the hub.
package azuredns

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/clusterforge/clusterforge/components/machine"
)

// Address is Azure DNS's, the wireserver's.
const Address = machine.WireserverAddress

// TTL is the answers' time to live, in seconds.
const TTL = 60

// Records are A records: a lowercase name, without its final dot, to its address.
type Records map[string]netip.Addr

// Answer is the reply to one DNS query message.
func (rs Records) Answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	reply := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true})
	reply.EnableCompression()
	addr, known := rs[strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))]
	if !known {
		reply = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: dnsmessage.RCodeNameError})
	}
	if err := reply.StartQuestions(); err != nil {
		return nil, err
	}
	if err := reply.Question(q); err != nil {
		return nil, err
	}
	if err := reply.StartAnswers(); err != nil {
		return nil, err
	}
	// A known name's other types have no records (NODATA): the stand-ins are IPv4 only.
	if known && (q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL) {
		if err := reply.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: TTL}, dnsmessage.AResource{A: addr.As4()}); err != nil {
			return nil, err
		}
	}
	return reply.Finish()
}

// Serve answers on UDP and TCP at listen until ctx ends.
func (rs Records) Serve(ctx context.Context, listen string) error {
	pc, err := net.ListenPacket("udp", listen)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		pc.Close()
		return err
	}
	go func() { <-ctx.Done(); pc.Close(); ln.Close() }()
	go rs.serveTCP(ln)
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if reply, err := rs.Answer(buf[:n]); err == nil {
			_, _ = pc.WriteTo(reply, from)
		}
	}
}

// serveTCP answers each connection's length-prefixed queries.
func (rs Records) serveTCP(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			for {
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				var size uint16
				if err := binary.Read(conn, binary.BigEndian, &size); err != nil {
					return
				}
				query := make([]byte, size)
				if _, err := io.ReadFull(conn, query); err != nil {
					return
				}
				reply, err := rs.Answer(query)
				if err != nil {
					return
				}
				if _, err := conn.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(reply))), reply...)); err != nil {
					return
				}
			}
		}()
	}
}

// Set adds one --record=name=address (a flag.Value).
func (rs Records) Set(v string) error {
	name, addr, ok := strings.Cut(v, "=")
	a, err := netip.ParseAddr(addr)
	if !ok || err != nil || !a.Is4() || name == "" {
		return fmt.Errorf("record %q: want name=IPv4 address", v)
	}
	rs[strings.ToLower(strings.TrimSuffix(name, "."))] = a
	return nil
}

func (rs Records) String() string {
	var out []string
	for n, a := range rs {
		out = append(out, n+"="+a.String())
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// Main serves as `azure-dns --listen=168.63.129.16:53 --record=name=address ...`.
func Main(args []string) error {
	fs := flag.NewFlagSet("azure-dns", flag.ContinueOnError)
	listen := fs.String("listen", net.JoinHostPort(Address, "53"), "host:port to answer on, UDP and TCP")
	records := Records{}
	fs.Var(records, "record", "name=IPv4 address, repeated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(records) == 0 {
		return errors.New("azure-dns: no --record")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Printf("Azure DNS on %s: %s", *listen, records)
	return records.Serve(ctx, *listen)
}
