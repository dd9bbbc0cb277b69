package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Verify opens an image and checks what every image of the project must
// be: the target's entrypoint and command, the non-root user, the version
// label, the CA bundle, passwd naming the user, and the binary present,
// executable, built for the image's architecture and statically linked (no
// ELF interpreter).
func Verify(img v1.Image, t Target, version string) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("%s: read config: %w", t.Name, err)
	}
	bin := path.Join(BinDir, path.Base(t.Package))
	var errs []error
	if !slices.Equal(cf.Config.Entrypoint, []string{bin}) {
		errs = append(errs, fmt.Errorf("entrypoint %q, want [%s]", cf.Config.Entrypoint, bin))
	}
	if !slices.Equal(cf.Config.Cmd, t.Args) {
		errs = append(errs, fmt.Errorf("cmd %q, want %q", cf.Config.Cmd, t.Args))
	}
	if cf.Config.User != User {
		errs = append(errs, fmt.Errorf("user %q, want %s", cf.Config.User, User))
	}
	if got := cf.Config.Labels[LabelVersion]; got != version {
		errs = append(errs, fmt.Errorf("label %s=%q, want %q", LabelVersion, got, version))
	}
	files, err := readFS(img)
	if err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	errs = append(errs, checkFiles(files, bin, cf.Architecture)...)
	if len(errs) > 0 {
		return fmt.Errorf("image %s: %w", t.Name, errors.Join(errs...))
	}
	return nil
}

func checkFiles(files map[string]fsEntry, bin, arch string) []error {
	var errs []error
	if ca := files[CAPath]; !bytes.Contains(ca.body, []byte("BEGIN CERTIFICATE")) {
		errs = append(errs, fmt.Errorf("%s holds no PEM certificate", CAPath))
	}
	if !strings.Contains(string(files["/etc/passwd"].body), fmt.Sprintf(":x:%d:%d:", UID, GID)) {
		errs = append(errs, fmt.Errorf("/etc/passwd names no user %d:%d", UID, GID))
	}
	if tmp, ok := files["/tmp"]; !ok || tmp.mode&0o1777 != 0o1777 {
		errs = append(errs, errors.New("/tmp missing or not mode 1777"))
	}
	b, ok := files[bin]
	switch {
	case !ok:
		errs = append(errs, fmt.Errorf("no %s in the image", bin))
	case b.mode&0o111 == 0:
		errs = append(errs, fmt.Errorf("%s is not executable (mode %o)", bin, b.mode))
	default:
		if err := static(b.body, arch); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", bin, err))
		}
	}
	return errs
}

// elfMachines is the ELF machine of each architecture an image may be
// built for (GOARCH → e_machine).
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"386":     elf.EM_386,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
	"loong64": elf.EM_LOONGARCH,
}

func archNames() string {
	names := make([]string, 0, len(elfMachines))
	for a := range elfMachines {
		names = append(names, a)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// static checks an ELF binary is for the image's architecture and has no
// interpreter (it runs on an empty base).
func static(b []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	if want, ok := elfMachines[arch]; !ok {
		return fmt.Errorf("the image's architecture %q is none this tool builds (%s)", arch, archNames())
	} else if f.Machine != want {
		return fmt.Errorf("built for %s, but the image's architecture is %s (%s)", f.Machine, arch, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (has an ELF interpreter; build with CGO_ENABLED=0)")
		}
	}
	return nil
}

type fsEntry struct {
	mode int64
	body []byte
}

// readFS flattens the image's layers into path → entry.
func readFS(img v1.Image) (map[string]fsEntry, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]fsEntry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the filesystem: %w", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", h.Name, err)
		}
		out["/"+strings.Trim(path.Clean(h.Name), "/")] = fsEntry{mode: h.Mode, body: body}
	}
}

// VerifyOutput opens what `images` wrote to out (the OCI layout and, when
// present, the tarballs) and verifies every image found for the targets.
func VerifyOutput(out string, targets []Target, version string) error {
	lp, err := layout.FromPath(path.Join(out, "oci"))
	if err != nil {
		return fmt.Errorf("open the OCI layout: %w", err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return fmt.Errorf("read the OCI layout's index: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("read the OCI layout's index: %w", err)
	}
	byName := map[string]v1.Descriptor{}
	for _, d := range im.Manifests {
		// The repository's last element names the image; the registry may
		// carry a port (localhost:5000/team/converge:v1).
		ref, err := name.ParseReference(d.Annotations["org.opencontainers.image.ref.name"])
		if err != nil {
			return fmt.Errorf("the OCI layout's index: %w", err)
		}
		byName[path.Base(ref.Context().RepositoryStr())] = d
	}
	var errs []error
	for _, t := range targets {
		d, ok := byName[t.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("image %s: not in the OCI layout", t.Name))
			continue
		}
		errs = append(errs, verifyDescriptor(idx, d, t, version))
		if d.MediaType.IsImage() {
			img, err := tarball.ImageFromPath(path.Join(out, t.Name+".tar"), nil)
			if err != nil {
				errs = append(errs, fmt.Errorf("image %s: open the tarball: %w", t.Name, err))
				continue
			}
			errs = append(errs, Verify(img, t, version))
		}
	}
	return errors.Join(errs...)
}

// verifyDescriptor verifies an image, or every platform of an index.
func verifyDescriptor(idx v1.ImageIndex, d v1.Descriptor, t Target, version string) error {
	if d.MediaType.IsImage() {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return fmt.Errorf("image %s: %w", t.Name, err)
		}
		return Verify(img, t, version)
	}
	sub, err := idx.ImageIndex(d.Digest)
	if err != nil {
		return fmt.Errorf("image %s: %w", t.Name, err)
	}
	im, err := sub.IndexManifest()
	if err != nil {
		return fmt.Errorf("image %s: %w", t.Name, err)
	}
	var errs []error
	for _, m := range im.Manifests {
		errs = append(errs, verifyDescriptor(sub, m, t, version))
	}
	return errors.Join(errs...)
}
