// Package ociimage makes OCI images without a registry, from files on disk: the add-on images
// clusterforge builds from source (one static binary each) and, for the test environment, the
// pause image and the layers of its large stand-in images (images/testenv). Archives are OCI
// image layouts in a tar, named with the annotation `ctr images import` reads.
package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
)

// epoch is every file's and history entry's time, so the same inputs give the same digests.
var epoch = time.Unix(0, 0).UTC()

// PauseEntrypoint is where images made here keep the pause binary.
const PauseEntrypoint = "/pause"

// Pause is an image whose single layer holds the static binary at PauseEntrypoint.
func Pause(dir, binary string) (v1.Image, error) { return Binary(dir, binary, PauseEntrypoint) }

// Binary is an image whose single layer holds the static binary at path, its entrypoint: how the
// add-on images clusterforge builds from source are made.
func Binary(dir, binary, path string) (v1.Image, error) {
	layer, err := BinaryLayer(dir, binary, path)
	if err != nil {
		return nil, err
	}
	return Image([]v1.Layer{layer}, path)
}

// Image is an amd64 Linux image of layers, in order, with entrypoint: the same layers give the
// same digest.
func Image(layers []v1.Layer, entrypoint string) (v1.Image, error) {
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	cfg := &v1.ConfigFile{
		Architecture: "amd64", OS: "linux", Created: v1.Time{Time: epoch},
		Config: v1.Config{Entrypoint: []string{entrypoint}},
	}
	img, err := mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{Layer: l, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: epoch}}}
	}
	return mutate.Append(img, adds...)
}

// BinaryLayer is a layer holding binary at path, cached in dir by the binary's content and path.
func BinaryLayer(dir, binary, path string) (v1.Layer, error) {
	src, err := os.Open(binary)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return nil, err
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, src); err != nil {
		return nil, err
	}
	sum.Write([]byte(path))
	name := "binary-" + hex.EncodeToString(sum.Sum(nil))[:16] + ".tar.gz"
	return CachedLayer(filepath.Join(dir, name), func(tw *tar.Writer) error {
		if _, err := src.Seek(0, io.SeekStart); err != nil {
			return err
		}
		return WriteTarFile(tw, strings.TrimPrefix(path, "/"), 0o755, st.Size(), src)
	})
}

// WriteTarFile writes one regular file of size bytes from r, with the epoch's time.
func WriteTarFile(tw *tar.Writer, name string, mode int64, size int64, r io.Reader) error {
	hdr := &tar.Header{Name: name, Mode: mode, Size: size, ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := io.CopyN(tw, r, size)
	return err
}

// fileLayer is a gzip'd layer tarball on disk whose digests were computed while it was written.
type fileLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

// CachedLayer writes the layer at path with write (unless a previous call did) and records its
// digest (of the gzip'd bytes) and diff id (of the tar) beside it.
func CachedLayer(path string, write func(*tar.Writer) error) (v1.Layer, error) {
	meta := path + ".json"
	var l struct{ Digest, DiffID string }
	if data, err := os.ReadFile(meta); err == nil && json.Unmarshal(data, &l) == nil {
		if st, err := os.Stat(path); err == nil {
			return newFileLayer(path, l.Digest, l.DiffID, st.Size())
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	compressed, uncompressed := sha256.New(), sha256.New()
	zw, _ := gzip.NewWriterLevel(io.MultiWriter(f, compressed), gzip.BestSpeed)
	tw := tar.NewWriter(io.MultiWriter(zw, uncompressed))
	if err := write(tw); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	l.Digest, l.DiffID = hexDigest(compressed), hexDigest(uncompressed)
	data, _ := json.Marshal(l)
	if err := os.WriteFile(meta, data, 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return nil, err
	}
	return newFileLayer(path, l.Digest, l.DiffID, size)
}

func newFileLayer(path, digest, diffID string, size int64) (*fileLayer, error) {
	d, err := v1.NewHash(digest)
	if err != nil {
		return nil, err
	}
	id, err := v1.NewHash(diffID)
	if err != nil {
		return nil, err
	}
	return &fileLayer{path: path, digest: d, diffID: id, size: size}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

func hexDigest(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }
