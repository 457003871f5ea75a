// Package ociarchive writes small OCI image archives for drills: one uncompressed layer of the
// files given, as `ctr images import` reads them.
package ociarchive

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"slices"
)

// Entry is a file of the layer: a regular file with Content, a directory, or a symlink to Link.
type Entry struct {
	Name    string
	Content []byte
	Mode    int64
	Dir     bool
	Link    string
}

// Write writes an image named ref, whose layer holds entries and whose entrypoint is entrypoint
// run as user, to path.
func Write(path, ref string, entries []Entry, entrypoint []string, user string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, Typeflag: tar.TypeReg, Size: int64(len(e.Content))}
		switch {
		case e.Dir:
			h.Typeflag, h.Size = tar.TypeDir, 0
		case e.Link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.Link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Content); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, data []byte) map[string]any {
		sum := sha256.Sum256(data)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		blobs[digest] = data
		return map[string]any{"mediaType": mediaType, "digest": digest, "size": len(data)}
	}
	layerDesc := add("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config, err := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": entrypoint, "User": user},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc["digest"].(string)}}})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": add("application/vnd.oci.image.config.v1+json", config), "layers": []any{layerDesc}})
	if err != nil {
		return err
	}
	manifestDesc := add("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc["annotations"] = map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{manifestDesc}})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	aw := tar.NewWriter(&out)
	file := func(name string, data []byte) error {
		if err := aw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := aw.Write(data)
		return err
	}
	if err := file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := file("index.json", index); err != nil {
		return err
	}
	for _, digest := range slices.Sorted(maps.Keys(blobs)) {
		if err := file("blobs/sha256/"+digest[len("sha256:"):], blobs[digest]); err != nil {
			return err
		}
	}
	if err := aw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}
