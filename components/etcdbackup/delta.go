package etcdbackup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// Delta is one stored chunk of an etcd cluster's changes: every event of revisions From to To,
// in order, as a watch of every key delivered them. Every revision changed at least one key, so
// a chunk holds each of its revisions and consecutive chunks meet (the next From is To+1).
type Delta struct {
	// Name is the object's name under the cluster's deltas/ folder: the revision range,
	// zero-padded so that names sort by revision.
	Name     string
	From, To int64
	Events   int
	SHA256   string
	Size     int64
	// Flushed is when the agent stored it: every write it holds was acknowledged before then.
	Flushed time.Time
}

// Metadata keys every delta object carries, beside metaCluster, metaSHA256 and metaSize.
const (
	metaEvents  = "events"
	metaFlushed = "flushed" // RFC 3339 with nanoseconds
)

var deltaName = regexp.MustCompile(`^([0-9]{20})-([0-9]{20})$`)

func (s *Store) deltaPath(name string) string { return s.Cluster + "/deltas/" + name }

// deltaNameOf is a chunk's name: its revision range.
func deltaNameOf(first, last int64) string { return fmt.Sprintf("%020d-%020d", first, last) }

// encodeEvents writes each event as its length (uvarint) and its protobuf encoding.
func encodeEvents(events []*mvccpb.Event) ([]byte, error) {
	var buf bytes.Buffer
	var n [binary.MaxVarintLen64]byte
	for _, ev := range events {
		b, err := proto.Marshal(ev)
		if err != nil {
			return nil, err
		}
		buf.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// decodeEvents reads what encodeEvents wrote.
func decodeEvents(b []byte) ([]*mvccpb.Event, error) {
	var out []*mvccpb.Event
	for len(b) > 0 {
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil, fmt.Errorf("event %d is cut short", len(out))
		}
		ev := &mvccpb.Event{}
		if err := proto.Unmarshal(b[n:n+int(size)], ev); err != nil {
			return nil, fmt.Errorf("event %d: %w", len(out), err)
		}
		out = append(out, ev)
		b = b[n+int(size):]
	}
	return out, nil
}

// PutDelta stores the events of revisions first to last (events in revision order) as one
// object, created whole or not at all; an object of the same range stored before is kept.
func (s *Store) PutDelta(ctx context.Context, first, last int64, events []*mvccpb.Event, flushed time.Time) (Delta, error) {
	if err := contiguous(first, last, events); err != nil {
		return Delta{}, err
	}
	body, err := encodeEvents(events)
	if err != nil {
		return Delta{}, err
	}
	sum := sha256.Sum256(body)
	d := Delta{Name: deltaNameOf(first, last), From: first, To: last, Events: len(events), SHA256: hex.EncodeToString(sum[:]),
		Size: int64(len(body)), Flushed: flushed.UTC()}
	_, err = s.container.NewBlockBlobClient(s.deltaPath(d.Name)).UploadBuffer(ctx, body, &blockblob.UploadBufferOptions{
		Metadata: map[string]*string{
			metaCluster: to.Ptr(s.Cluster), metaSHA256: to.Ptr(d.SHA256), metaSize: to.Ptr(strconv.FormatInt(d.Size, 10)),
			metaEvents: to.Ptr(strconv.Itoa(d.Events)), metaFlushed: to.Ptr(d.Flushed.Format(time.RFC3339Nano)),
		},
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}},
	})
	if err != nil && !bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
		return Delta{}, fmt.Errorf("store delta %s: %w", d.Name, err)
	}
	return d, nil
}

// contiguous checks that events hold every revision first to last, in order.
func contiguous(first, last int64, events []*mvccpb.Event) error {
	next := first
	for i, ev := range events {
		switch rev := ev.Kv.ModRevision; {
		case rev == next:
			next++
		case rev == next-1 && i > 0: // another key of the same transaction
		default:
			return fmt.Errorf("event %d is at revision %d, want %d: revisions %d to %d are not whole", i, rev, next, first, last)
		}
	}
	if next != last+1 {
		return fmt.Errorf("the events end at revision %d, want %d", next-1, last)
	}
	return nil
}

// Deltas returns the cluster's stored deltas in revision order. An object whose name or
// metadata is not one of ours is listed with an empty SHA256, so a chain stops before it.
func (s *Store) Deltas(ctx context.Context) ([]Delta, error) {
	out, err := list(ctx, s, s.deltaPath(""), parseDelta)
	sort.SliceStable(out, func(i, j int) bool { return out[i].From < out[j].From })
	return out, err
}

func parseDelta(name string, get func(key string) string) Delta {
	d := Delta{Name: name}
	m := deltaName.FindStringSubmatch(name)
	if m == nil {
		return d
	}
	from, errFrom := strconv.ParseInt(m[1], 10, 64)
	to, errTo := strconv.ParseInt(m[2], 10, 64)
	if errFrom != nil || errTo != nil { // beyond int64: no revision etcd can reach
		return d
	}
	d.From, d.To = from, to
	d.SHA256 = get(metaSHA256)
	d.Size, _ = strconv.ParseInt(get(metaSize), 10, 64)
	d.Events, _ = strconv.Atoi(get(metaEvents))
	d.Flushed, _ = time.Parse(time.RFC3339Nano, get(metaFlushed))
	return d
}

// ReadDelta downloads a delta and returns its events, refusing it, by name, unless its size and
// checksum match what it was stored with and it holds every revision of its range. A refusal for
// what the delta holds wraps ErrChainBroken; a failed download does not, and may pass on retry.
func (s *Store) ReadDelta(ctx context.Context, d Delta) ([]*mvccpb.Event, error) {
	if d.SHA256 == "" {
		return nil, fmt.Errorf("%w: delta %s has no checksum: a partial object or not one of ours", ErrChainBroken, quoted(d.Name))
	}
	resp, err := s.container.NewBlobClient(s.deltaPath(d.Name)).DownloadStream(ctx, nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) { // listed, then gone: no retry brings it back
		return nil, fmt.Errorf("%w: delta %s is gone from the store", ErrChainBroken, d.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("download delta %s: %w", d.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("download delta %s: %w", d.Name, err)
	}
	if sum := sha256.Sum256(body); int64(len(body)) != d.Size || hex.EncodeToString(sum[:]) != d.SHA256 {
		return nil, fmt.Errorf("%w: delta %s is corrupt: %d bytes with sha256 %x, stored as %d bytes with sha256 %s", ErrChainBroken, d.Name, len(body), sum, d.Size, d.SHA256)
	}
	events, err := decodeEvents(body)
	if err == nil {
		err = contiguous(d.From, d.To, events)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: delta %s: %w", ErrChainBroken, d.Name, err)
	}
	return events, nil
}

// DeleteDelta removes one delta.
func (s *Store) DeleteDelta(ctx context.Context, name string) error {
	_, err := s.container.NewBlobClient(s.deltaPath(name)).Delete(ctx, &blob.DeleteOptions{})
	if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound) {
		return fmt.Errorf("delete delta %s: %w", name, err)
	}
	return nil
}

// ErrChainBroken is wrapped by Chain when the deltas after a base do not reach as far as stored
// ones do: a missing chunk, one not ours, or a gap in what the agent watched.
var ErrChainBroken = errors.New("the delta chain is broken")

// Chain returns the deltas that take a snapshot of revision base forward, in order, and the
// revision they reach. Deltas wholly at or before what is already covered are left out: they
// hold nothing new (two agents may have stored the same revisions around a leader change). A
// delta that starts beyond the revision reached so far, or has no checksum, ends the chain with
// an error wrapping ErrChainBroken; the chain before it is still returned.
func Chain(base int64, deltas []Delta) (chain []Delta, reached int64, err error) {
	reached = base
	for _, d := range deltas {
		switch {
		case d.SHA256 == "" || d.From == 0:
			return chain, reached, fmt.Errorf("%w after revision %d: %s is not a delta of ours", ErrChainBroken, reached, quoted(d.Name))
		case d.To <= reached:
		case d.From > reached+1:
			return chain, reached, fmt.Errorf("%w: revisions %d to %d are missing (the next delta is %s)", ErrChainBroken, reached+1, d.From-1, d.Name)
		default:
			chain = append(chain, d)
			reached = d.To
		}
	}
	return chain, reached, nil
}
