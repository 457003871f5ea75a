package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ImageNameAnnotation names an index entry for `ctr images import`, which then creates the image
// under that name pointing at the manifest (so its digest is the manifest digest).
const ImageNameAnnotation = "io.containerd.image.name"

// WriteArchive writes img as an OCI image layout tar at path, named name, and returns the
// manifest digest ("sha256:<hex>"). It writes to path.tmp and renames, so a failed write leaves
// no archive behind.
func WriteArchive(img v1.Image, name, path string) (string, error) {
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return "", err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return "", err
	}
	configDigest, err := img.ConfigName()
	if err != nil {
		return "", err
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1, Digest: digest, Size: int64(len(manifest)),
			Annotations: map[string]string{ImageNameAnnotation: name},
		}},
	})
	if err != nil {
		return "", err
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return "", err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	small := func(name string, data []byte) error {
		return WriteTarFile(tw, name, 0o644, int64(len(data)), bytes.NewReader(data))
	}
	if err := small("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return "", err
	}
	layers, err := img.Layers()
	if err != nil {
		return "", err
	}
	for _, l := range layers {
		if err := writeBlob(tw, l); err != nil {
			return "", err
		}
	}
	for _, blob := range []struct {
		digest v1.Hash
		data   []byte
	}{{configDigest, config}, {digest, manifest}} {
		if err := small(blobPath(blob.digest), blob.data); err != nil {
			return "", err
		}
	}
	if err := small("index.json", index); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return digest.String(), os.Rename(path+".tmp", path)
}

func writeBlob(tw *tar.Writer, l v1.Layer) error {
	digest, err := l.Digest()
	if err != nil {
		return err
	}
	size, err := l.Size()
	if err != nil {
		return err
	}
	r, err := l.Compressed()
	if err != nil {
		return err
	}
	defer r.Close()
	return WriteTarFile(tw, blobPath(digest), 0o644, size, r)
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// Preload is one entry of the worker templates' preload_images variable.
type Preload struct {
	Name    string `json:"name"`
	Archive string `json:"archive"` // "": pulled from the registry at bake time
	Digest  string `json:"digest"`
}

// PreloadVarsFile is the name of the preload list beside its archives.
const PreloadVarsFile = "preload.pkrvars.json"

// PreloadVars is a Packer variable file (JSON) that sets preload_images.
type PreloadVars struct {
	PreloadImages []Preload `json:"preload_images"`
}

// ReadPreloadVars reads a variable file WritePreloadVars wrote.
func ReadPreloadVars(path string) (PreloadVars, error) {
	var vars PreloadVars
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &vars)
	}
	if err != nil {
		return vars, fmt.Errorf("preload list %s: %w", path, err)
	}
	return vars, nil
}

// WritePreloadVars writes vars as a Packer variable file.
func WritePreloadVars(path string, vars PreloadVars) error {
	data, err := json.MarshalIndent(vars, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
