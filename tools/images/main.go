// Command images builds Converge's container images from the Go toolchain
// alone — no Docker engine, no base image pulled from a registry:
//
//	cd tools && go run ./images -root .. -out ../.artifacts/images   (or: just images)
//
// Each image is one layer on an empty base: a static binary (CGO_ENABLED=0,
// -trimpath) in /usr/local/bin, the CA bundle at
// /etc/ssl/certs/ca-certificates.crt, a passwd/group naming the non-root
// user 65532 the image runs as, and the OCI labels (version from git
// describe, revision, created). The output directory gets (each run
// replaces what an earlier one wrote there: the layout and every NAME.tar)
//
//	oci/          one OCI image layout holding every image (an index per
//	              image when several platforms are built), each tagged with
//	              the org.opencontainers.image.ref.name annotation NAME:VERSION
//	NAME.tar      per image, a `docker save`-format tarball (single platform
//	              only) that `docker load`, `podman load`, `kind load
//	              image-archive` and `crane push` accept
//
// File times and the created label come from SOURCE_DATE_EPOCH, else the
// commit's time, so the same commit builds the same digests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Target is one image of the project: which package, what default command.
type Target struct {
	Name    string
	Package string
	Args    []string
}

// Targets are the images `just images` builds.
var Targets = []Target{
	{Name: "converge", Package: "./cmd/converge", Args: []string{"serve"}},
	{Name: "stdworker", Package: "./cmd/stdworker"},
	{Name: "classic-worker", Package: "./examples/classic/cmd/worker"},
}

type options struct {
	root, out, version, repo, caFile, source string
	platforms                                []v1.Platform
	only                                     map[string]bool
}

func main() {
	ctx, stop := stopContext(context.Background(), "images")
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.root, "root", "..", "the converge source tree (the main module)")
	fs.StringVar(&o.out, "out", "../.artifacts/images", "output directory (an OCI layout in oci/ and NAME.tar per image)")
	fs.StringVar(&o.version, "version", "", "the version label and tag (default: git describe --tags --always --dirty)")
	fs.StringVar(&o.repo, "repo", "converge-run", "repository prefix of the tags in the tarballs and layout (REPO/NAME:VERSION)")
	fs.StringVar(&o.caFile, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "the PEM CA bundle to ship (Debian: the ca-certificates package)")
	fs.StringVar(&o.source, "source", "https://github.com/converge-run/converge", "the org.opencontainers.image.source label")
	plats := fs.String("platforms", "linux/"+runtime.GOARCH, "comma-separated OS/ARCH list, e.g. linux/amd64,linux/arm64")
	only := fs.String("images", "", "comma-separated subset of "+targetNames()+" (default: all)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: the command takes flags only (lists are comma-separated: -platforms linux/amd64,linux/arm64)", fs.Arg(0))
	}
	seen := map[string]bool{}
	for _, p := range strings.Split(*plats, ",") {
		pl, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil || pl.OS != "linux" || pl.Architecture == "" {
			return o, fmt.Errorf("-platforms %q: want linux/ARCH entries like linux/amd64", p)
		}
		if _, ok := elfMachines[pl.Architecture]; !ok {
			return o, fmt.Errorf("-platforms %q: architecture %s is not supported (have %s)", p, pl.Architecture, archNames())
		}
		if seen[pl.String()] {
			return o, fmt.Errorf("-platforms: %s is listed twice", pl)
		}
		seen[pl.String()] = true
		o.platforms = append(o.platforms, *pl)
	}
	// The tags are REPO/NAME:VERSION: a -repo no reference can carry is
	// refused here, before the previous output is cleared.
	for _, t := range Targets {
		if _, err := name.NewRepository(o.repo + "/" + t.Name); err != nil {
			return o, fmt.Errorf("-repo %q: %w", o.repo, err)
		}
	}
	if *only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(*only, ",") {
			if !isTarget(n) {
				return o, fmt.Errorf("-images: unknown image %q (have %s)", n, targetNames())
			}
			o.only[n] = true
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(o.caFile)
	if err != nil {
		return fmt.Errorf("read the CA bundle (-ca-certs; on Debian apt-get install ca-certificates): %w", err)
	}
	if o.version == "" {
		if o.version, err = git(ctx, o.root, "describe", "--tags", "--always", "--dirty"); err != nil {
			return err
		}
	}
	revision, _ := git(ctx, o.root, "rev-parse", "HEAD")
	created, err := sourceDate(ctx, o.root)
	if err != nil {
		return err
	}
	binDir, err := os.MkdirTemp("", "converge-images-")
	if err != nil {
		return fmt.Errorf("create build dir: %w", err)
	}
	defer os.RemoveAll(binDir)
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", o.out, err)
	}
	// Every run replaces the previous output: a tarball an earlier run left
	// (of an image not built now, or when several platforms write none)
	// must not pass for this run's.
	for _, t := range Targets {
		if err := os.Remove(filepath.Join(o.out, t.Name+".tar")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the previous %s.tar: %w", t.Name, err)
		}
	}
	lp, err := freshLayout(filepath.Join(o.out, "oci"))
	if err != nil {
		return err
	}
	var built []Target
	for _, t := range Targets {
		if o.only != nil && !o.only[t.Name] {
			continue
		}
		spec := ImageSpec{Name: t.Name, Args: t.Args, Version: o.version, Revision: revision, Source: o.source, CACerts: ca, Created: created}
		if err := buildTarget(ctx, o, lp, binDir, t, spec); err != nil {
			return err
		}
		built = append(built, t)
	}
	if err := VerifyOutput(o.out, built, o.version); err != nil {
		return fmt.Errorf("verify what was written: %w", err)
	}
	outputs := "the OCI layout oci/ and NAME.tar per image"
	if len(o.platforms) > 1 {
		outputs = "the OCI layout oci/, an index per image"
	}
	fmt.Printf("verified %d images in %s: %s\n", len(built), o.out, outputs)
	return nil
}

// buildTarget compiles the target for each platform, assembles the images
// and writes them to the layout (and the tarball for one platform).
func buildTarget(ctx context.Context, o options, lp layout.Path, binDir string, t Target, spec ImageSpec) error {
	ref, err := name.NewTag(fmt.Sprintf("%s/%s:%s", o.repo, t.Name, tagSafe(o.version)))
	if err != nil {
		return fmt.Errorf("image %s: tag: %w", t.Name, err)
	}
	annotations := map[string]string{"org.opencontainers.image.ref.name": ref.String()}
	var idx v1.ImageIndex = empty.Index
	var single v1.Image
	for _, p := range o.platforms {
		dir := filepath.Join(binDir, p.OS+"-"+p.Architecture)
		bin, err := goBuild(ctx, o.root, dir, t.Package, o.version, p)
		if err != nil {
			return err
		}
		spec.Binary, spec.Platform = bin, p
		img, err := Build(spec)
		if err != nil {
			return err
		}
		single = img
		pc := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pc}})
		digest, _ := img.Digest()
		fmt.Printf("%s %s/%s %s\n", ref, p.OS, p.Architecture, digest)
	}
	if len(o.platforms) == 1 {
		if err := lp.AppendImage(single, layout.WithAnnotations(annotations)); err != nil {
			return fmt.Errorf("image %s: write the OCI layout: %w", t.Name, err)
		}
		tarPath := filepath.Join(o.out, t.Name+".tar")
		if err := tarball.WriteToFile(tarPath, ref, single); err != nil {
			return fmt.Errorf("image %s: write %s: %w", t.Name, tarPath, err)
		}
		return nil
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(annotations)); err != nil {
		return fmt.Errorf("image %s: write the OCI layout: %w", t.Name, err)
	}
	return nil
}

// freshLayout replaces any previous layout at dir with an empty one.
func freshLayout(dir string) (layout.Path, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("clear %s: %w", dir, err)
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", fmt.Errorf("create the OCI layout %s: %w", dir, err)
	}
	return lp, nil
}

// goBuild compiles one package of the main module into dir as a static
// binary for the platform and returns its path.
func goBuild(ctx context.Context, root, dir, pkg, version string, p v1.Platform) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.BuildVersion="+version, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=")
	if p.Variant != "" && p.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s for %s/%s: %w\n%s", pkg, p.OS, p.Architecture, err, b)
	}
	return out, nil
}

func git(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// sourceDate is SOURCE_DATE_EPOCH, else the HEAD commit's time.
func sourceDate(ctx context.Context, root string) (time.Time, error) {
	raw := os.Getenv("SOURCE_DATE_EPOCH")
	if raw == "" {
		var err error
		if raw, err = git(ctx, root, "log", "-1", "--format=%ct"); err != nil {
			return time.Time{}, err
		}
	}
	sec, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970: %w", raw, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

var tagUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// tagSafe turns a git describe string into a valid image tag.
func tagSafe(v string) string {
	t := tagUnsafe.ReplaceAllString(v, "-")
	if t == "" || t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

func isTarget(n string) bool {
	for _, t := range Targets {
		if t.Name == n {
			return true
		}
	}
	return false
}

func targetNames() string {
	names := make([]string, 0, len(Targets))
	for _, t := range Targets {
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}
