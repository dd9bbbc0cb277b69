package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed layout: where the binary and the CA bundle live and who
// runs it.
const (
	BinDir  = "/usr/local/bin"
	CAPath  = "/etc/ssl/certs/ca-certificates.crt"
	UID     = 65532
	GID     = 65532
	User    = "65532:65532"
	WorkDir = "/home/nonroot"
)

// Label keys (the OCI annotation names, used as config labels).
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelTitle    = "org.opencontainers.image.title"
	LabelSource   = "org.opencontainers.image.source"
	LabelRevision = "org.opencontainers.image.revision"
	LabelCreated  = "org.opencontainers.image.created"
)

// ImageSpec is one image: a static binary on an empty base.
type ImageSpec struct {
	Name     string   // image name, e.g. "converge"
	Binary   string   // the binary's path on this machine
	Args     []string // default command (CMD), e.g. ["serve"]
	Version  string   // git describe
	Revision string   // the commit
	Source   string   // the source repository URL (label)
	CACerts  []byte   // the PEM bundle written at CAPath
	Platform v1.Platform
	// Created is the image's creation time (also every file's mtime);
	// a fixed time keeps the digest reproducible.
	Created time.Time
}

// Build assembles the image: one layer holding the directory skeleton, a
// passwd/group naming the non-root user, the CA bundle and the binary, and a
// config with the entrypoint, user, environment and labels.
func Build(s ImageSpec) (v1.Image, error) {
	if s.Name == "" || s.Binary == "" {
		return nil, fmt.Errorf("image spec: name and binary are required (got name=%q binary=%q)", s.Name, s.Binary)
	}
	if len(s.CACerts) == 0 {
		return nil, fmt.Errorf("image %s: the CA bundle is empty", s.Name)
	}
	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, fmt.Errorf("image %s: read binary: %w", s.Name, err)
	}
	layerTar, err := rootfs(s, bin)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.Name, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", s.Name, err)
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: s.Created}, CreatedBy: "converge tools/images: " + s.Name},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: append layer: %w", s.Name, err)
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", s.Name, err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Variant = s.Platform.Architecture, s.Platform.OS, s.Platform.Variant
	cf.Created = v1.Time{Time: s.Created}
	cf.Author = "converge"
	cf.Config = v1.Config{
		Entrypoint: []string{path.Join(BinDir, path.Base(s.Binary))},
		Cmd:        s.Args,
		User:       User,
		WorkingDir: WorkDir,
		Env: []string{
			"PATH=/usr/local/bin",
			"SSL_CERT_FILE=" + CAPath,
			"HOME=" + WorkDir,
		},
		Labels: labels(s),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image %s: set config: %w", s.Name, err)
	}
	return img, nil
}

func labels(s ImageSpec) map[string]string {
	l := map[string]string{
		LabelTitle:   s.Name,
		LabelVersion: s.Version,
		LabelCreated: s.Created.UTC().Format(time.RFC3339),
	}
	if s.Revision != "" {
		l[LabelRevision] = s.Revision
	}
	if s.Source != "" {
		l[LabelSource] = s.Source
	}
	return l
}

// file is one entry of the image's filesystem.
type file struct {
	name string
	mode int64
	dir  bool
	uid  int
	body []byte
}

// rootfs writes the layer's tar: sorted, fixed mtimes and owners, so the
// same inputs give the same digest.
func rootfs(s ImageSpec, bin []byte) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", UID, GID, WorkDir)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", GID)
	files := []file{
		{name: "etc", mode: 0o755, dir: true},
		{name: "etc/ssl", mode: 0o755, dir: true},
		{name: "etc/ssl/certs", mode: 0o755, dir: true},
		{name: CAPath[1:], mode: 0o644, body: s.CACerts},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "home", mode: 0o755, dir: true},
		{name: WorkDir[1:], mode: 0o700, dir: true, uid: UID},
		{name: "tmp", mode: 0o1777, dir: true},
		{name: "usr", mode: 0o755, dir: true},
		{name: "usr/local", mode: 0o755, dir: true},
		{name: BinDir[1:], mode: 0o755, dir: true},
		{name: path.Join(BinDir, path.Base(s.Binary))[1:], mode: 0o755, body: bin},
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: s.Created, Uid: f.uid, Gid: f.uid, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	return buf.Bytes(), nil
}
