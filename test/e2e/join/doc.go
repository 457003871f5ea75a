// Package join holds the end-to-end scenarios of a machine becoming a node: the attested join and
// what the join token may still do once the workers joined. Package booted runs them.
package join
