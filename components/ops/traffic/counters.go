package traffic

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// Direction is a pod's side of a packet.
type Direction string

const (
	Transmit Direction = "tx" // the pod sent it
	Receive  Direction = "rx" // the pod is its destination
)

// TableName is the nftables table the counters live in, of the ip family (pod addresses here are
// IPv4). Its chains only count, at mangle priority, and accept everything.
const TableName = "clusterforge_traffic"

var table = &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}

// hooks are where a pod's packets pass: forwarded (to and from other pods, other nodes and the
// VNet), delivered to the host (input) and sent by the host (output).
var hooks = []struct {
	chain      string
	hook       *nftables.ChainHook
	directions []Direction
}{
	{"forward", nftables.ChainHookForward, []Direction{Transmit, Receive}},
	{"input", nftables.ChainHookInput, []Direction{Transmit}},
	{"output", nftables.ChainHookOutput, []Direction{Receive}},
}

// Counters programs and reads the table through a netlink connection to nf_tables.
type Counters struct {
	Conn *nftables.Conn
}

// Sync makes the table count exactly ips, in one atomic batch: counters of addresses already
// counted keep their values, new addresses get zeroed counters, and the counters of addresses no
// longer given are deleted with their rules.
func (c *Counters) Sync(ips []netip.Addr) error {
	have, err := c.Read()
	if err != nil {
		return err
	}
	c.Conn.AddTable(table)
	policy := nftables.ChainPolicyAccept
	want := map[string]bool{}
	for _, ip := range ips {
		for _, d := range []Direction{Transmit, Receive} {
			name := counterName(d, ip)
			want[name] = true
			if _, ok := have[name]; !ok {
				c.Conn.AddObj(&nftables.CounterObj{Table: table, Name: name})
			}
		}
	}
	for _, h := range hooks {
		chain := c.Conn.AddChain(&nftables.Chain{Name: h.chain, Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: h.hook, Priority: nftables.ChainPriorityMangle, Policy: &policy})
		c.Conn.FlushChain(chain)
		for _, ip := range ips {
			for _, d := range h.directions {
				c.Conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: countRule(d, ip)})
			}
		}
	}
	for name := range have {
		if !want[name] {
			c.Conn.DeleteObject(&nftables.CounterObj{Table: table, Name: name})
		}
	}
	if err := c.Conn.Flush(); err != nil {
		return fmt.Errorf("nftables table %s: %w", TableName, err)
	}
	return nil
}

// countRule is "ip saddr IP counter name tx-IP" (Transmit) or "ip daddr IP counter name rx-IP".
func countRule(d Direction, ip netip.Addr) []expr.Any {
	offset := uint32(12) // the IPv4 header's source address
	if d == Receive {
		offset = 16 // its destination address
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip.AsSlice()},
		&expr.Objref{Type: int(nftables.ObjTypeCounter), Name: counterName(d, ip)},
	}
}

// Bytes are an address's counted bytes by direction.
type Bytes map[Direction]uint64

// Read is every counter of the table by name (none when the table does not exist yet).
func (c *Counters) Read() (map[string]uint64, error) {
	tables, err := c.Conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return nil, fmt.Errorf("nftables: list tables: %w", err)
	}
	out := map[string]uint64{}
	for _, t := range tables {
		if t.Name != TableName {
			continue
		}
		objs, err := c.Conn.GetObjects(table)
		if err != nil {
			return nil, fmt.Errorf("nftables table %s: %w", TableName, err)
		}
		for _, o := range objs {
			if counter, ok := o.(*nftables.CounterObj); ok {
				out[counter.Name] = counter.Bytes
			}
		}
	}
	return out, nil
}

// ByAddress is Read by address and direction, for the counters this package named.
func (c *Counters) ByAddress() (map[netip.Addr]Bytes, error) {
	counters, err := c.Read()
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]Bytes{}
	for name, bytes := range counters {
		d, ip, ok := parseCounterName(name)
		if !ok {
			continue
		}
		if out[ip] == nil {
			out[ip] = Bytes{}
		}
		out[ip][d] = bytes
	}
	return out, nil
}
