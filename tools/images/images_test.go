package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeTree is a main module with one tiny program at the stdworker
// target's package path, so the test builds an image in a second or two
// instead of compiling the real binaries.
func fakeTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "cmd", "stdworker")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(root, "go.mod"), []byte("module example.com/fake\n\ngo 1.22\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

var BuildVersion = "dev"

// No imports: only the runtime is compiled for the static build.
func main() { println(BuildVersion) }
`), 0o644))
	return root
}

func caBundle(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	p := filepath.Join(t.TempDir(), "ca.crt")
	must(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func target(name string) Target {
	for _, tg := range Targets {
		if tg.Name == name {
			return tg
		}
	}
	panic("no target " + name)
}

// TestBuildWritesVerifiedImages runs the command end to end on the fake
// tree, then opens both outputs again and checks each image's entrypoint,
// user, labels and files.
func TestBuildWritesVerifiedImages(t *testing.T) {
	root, out, ca := fakeTree(t), filepath.Join(t.TempDir(), "out"), caBundle(t)
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	args := []string{"-root", root, "-out", out, "-images", "stdworker", "-ca-certs", ca, "-version", "v1.2.3-4-gabcdef"}
	must(t, run(t.Context(), args))

	lp, err := layout.FromPath(filepath.Join(out, "oci"))
	must(t, err)
	idx, err := lp.ImageIndex()
	must(t, err)
	im, err := idx.IndexManifest()
	must(t, err)
	if len(im.Manifests) != 1 {
		t.Fatalf("layout has %d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if ref := d.Annotations["org.opencontainers.image.ref.name"]; !strings.HasSuffix(ref, "converge-run/stdworker:v1.2.3-4-gabcdef") {
		t.Errorf("ref.name %q", ref)
	}
	img, err := idx.Image(d.Digest)
	must(t, err)
	must(t, Verify(img, target("stdworker"), "v1.2.3-4-gabcdef"))
	cf, err := img.ConfigFile()
	must(t, err)
	if cf.Architecture != runtime.GOARCH || cf.OS != "linux" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if got := cf.Config.Labels[LabelCreated]; got != "2023-11-14T22:13:20Z" {
		t.Errorf("created label %q (from SOURCE_DATE_EPOCH)", got)
	}
	files, err := readFS(img)
	must(t, err)
	if files[BinDir+"/stdworker"].mode != 0o755 {
		t.Errorf("binary mode %o", files[BinDir+"/stdworker"].mode)
	}

	fromTar, err := tarball.ImageFromPath(filepath.Join(out, "stdworker.tar"), nil)
	must(t, err)
	// The tarball re-states the manifest in Docker's format; the image id
	// (the config's digest) is the same image.
	d1, _ := img.ConfigName()
	d2, _ := fromTar.ConfigName()
	if d1 != d2 {
		t.Errorf("tarball image id %s != layout image id %s", d2, d1)
	}

	// The same inputs build the same digest.
	out2 := filepath.Join(t.TempDir(), "out")
	must(t, run(t.Context(), []string{"-root", root, "-out", out2, "-images", "stdworker", "-ca-certs", ca, "-version", "v1.2.3-4-gabcdef"}))
	again, err := tarball.ImageFromPath(filepath.Join(out2, "stdworker.tar"), nil)
	must(t, err)
	if d3, _ := again.ConfigName(); d3 != d1 {
		t.Errorf("rebuild digest %s != %s: the build is not reproducible", d3, d1)
	}
}

// TestVerifyRejects checks the verifier fails an image that is not what
// the project ships: a script instead of a static binary, the wrong version.
func TestVerifyRejects(t *testing.T) {
	ca, err := os.ReadFile(caBundle(t))
	must(t, err)
	script := filepath.Join(t.TempDir(), "stdworker")
	must(t, os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755))
	img, err := Build(ImageSpec{Name: "stdworker", Binary: script, Version: "v1", CACerts: ca,
		Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Created: time.Unix(0, 0)})
	must(t, err)
	err = Verify(img, target("stdworker"), "v2")
	if err == nil {
		t.Fatal("Verify accepted a shell script with the wrong version label")
	}
	for _, want := range []string{"not an ELF binary", `label org.opencontainers.image.version="v1", want "v2"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := Build(ImageSpec{Name: "x", Binary: script}); err == nil || !strings.Contains(err.Error(), "CA bundle is empty") {
		t.Errorf("Build without CA certs: %v", err)
	}
}

func TestFlagsRejectBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-images", "nope"}, {"-platforms", "windows/amd64"}, {"-platforms", "linux"},
		{"-platforms", "linux/mips64"},               // no ELF machine to verify the binary against
		{"-platforms", "linux/amd64,linux/amd64"},    // the same platform twice
		{"-platforms", "linux/amd64", "linux/arm64"}, // a space, not a comma: arm64 was ignored
		{"-images", "converge", "stdworker"},         // likewise
		{"-repo", "Team/Images"},                     // upper case: no valid image reference
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
	if got := tagSafe("v1.0+dirty/x"); got != "v1.0-dirty-x" {
		t.Errorf("tagSafe: %q", got)
	}
}

// TestRunRemovesStaleTarballs: a NAME.tar a previous run left in -out is
// gone after a run that writes no tarball for it (several platforms, or a
// subset of the images), so nothing stale sits beside the fresh layout.
func TestRunRemovesStaleTarballs(t *testing.T) {
	root, out, ca := fakeTree(t), filepath.Join(t.TempDir(), "out"), caBundle(t)
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	must(t, os.MkdirAll(out, 0o755))
	for _, n := range []string{"stdworker.tar", "classic-worker.tar"} {
		must(t, os.WriteFile(filepath.Join(out, n), []byte("stale"), 0o644))
	}
	// Two platforms of the host's architecture (the variant differs): an
	// index per image, no tarballs, and no cross-compilation in the test.
	plats := "linux/" + runtime.GOARCH + ",linux/" + runtime.GOARCH + "/v2"
	must(t, run(t.Context(), []string{"-root", root, "-out", out, "-images", "stdworker", "-ca-certs", ca,
		"-version", "v1", "-platforms", plats}))
	for _, n := range []string{"stdworker.tar", "classic-worker.tar"} {
		if _, err := os.Stat(filepath.Join(out, n)); !os.IsNotExist(err) {
			t.Errorf("%s from an earlier run is still in -out (stat: %v)", n, err)
		}
	}
}

// TestRunWithRegistryPort: a -repo naming a registry with a port
// (localhost:5000/team) writes and verifies its images.
func TestRunWithRegistryPort(t *testing.T) {
	root, out, ca := fakeTree(t), filepath.Join(t.TempDir(), "out"), caBundle(t)
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	must(t, run(t.Context(), []string{"-root", root, "-out", out, "-images", "stdworker", "-ca-certs", ca,
		"-version", "v1", "-repo", "localhost:5000/team"}))
}

// TestVerifyRejectsWrongArchitecture: a binary compiled for another
// architecture than the image's platform does not pass.
func TestVerifyRejectsWrongArchitecture(t *testing.T) {
	ca, err := os.ReadFile(caBundle(t))
	must(t, err)
	host := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	bin, err := goBuild(t.Context(), fakeTree(t), t.TempDir(), "./cmd/stdworker", "v1", host)
	must(t, err)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	img, err := Build(ImageSpec{Name: "stdworker", Binary: bin, Version: "v1", CACerts: ca,
		Platform: v1.Platform{OS: "linux", Architecture: other}, Created: time.Unix(0, 0)})
	must(t, err)
	err = Verify(img, target("stdworker"), "v1")
	if err == nil || !strings.Contains(err.Error(), "built for") {
		t.Fatalf("Verify of a %s binary in a linux/%s image: %v", runtime.GOARCH, other, err)
	}
}

// TestBadRepoWritesNothing: a -repo no image reference can carry is
// refused before the previous output is cleared.
func TestBadRepoWritesNothing(t *testing.T) {
	root, out, ca := fakeTree(t), filepath.Join(t.TempDir(), "out"), caBundle(t)
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	must(t, run(t.Context(), []string{"-root", root, "-out", out, "-images", "stdworker", "-ca-certs", ca, "-version", "v1"}))
	err := run(t.Context(), []string{"-root", root, "-out", out, "-images", "stdworker", "-ca-certs", ca, "-version", "v2", "-repo", "Team/Images"})
	if err == nil || !strings.Contains(err.Error(), "-repo") {
		t.Fatalf("a bad -repo: %v, want an error naming -repo", err)
	}
	if _, err := tarball.ImageFromPath(filepath.Join(out, "stdworker.tar"), nil); err != nil {
		t.Errorf("the previous run's tarball is gone after the refused run: %v", err)
	}
	must(t, VerifyOutput(out, []Target{target("stdworker")}, "v1"))
}
